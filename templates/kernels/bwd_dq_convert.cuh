// The non-deterministic backward's last launch: dQ = softmax_scale * the fp32 accumulator the
// dK/dV kernel added to, in the element type and Q's layout. A warp takes one row at a time.
//
// Config: Element, kHeadDimQk, kBlockM (rows a CTA), kWarps, kVarlen.
#pragma once

#include "../arch/common.cuh"
#include "../attn/dq_accum.cuh"
#include "../attn/mask.cuh"  // the KernelConfig names its Pattern
#include "../tile/element.cuh"
#include "bwd_params.cuh"

namespace fj {

template <class Cfg>
struct BwdDqConvertLayout {
  static constexpr int kThreads = Cfg::kWarps * 32;
  static constexpr int kSharedBytes = 0;
  static_assert(Cfg::kBlockM % Cfg::kWarps == 0, "each warp owns whole rows");
};

template <class Cfg>
__device__ __forceinline__ void bwd_dq_convert(const BwdParams& p) {
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = blockIdx.y, batch = blockIdx.z;
  constexpr bool varlen = Cfg::kVarlen;
  const int q_start = varlen ? p.cu_seqlens_q[batch] : 0;
  const int seqlen_q = varlen ? p.cu_seqlens_q[batch + 1] - q_start : p.seqlen_q;
  const long long dq_row0 = varlen ? q_start * p.dq_seq_stride : batch * p.dq_batch_stride;
  Storage* dq = static_cast<Storage*>(p.d_q) + dq_row0 + head * p.dq_head_stride;
  constexpr int kRowsPerWarp = Cfg::kBlockM / Cfg::kWarps;
  const int row0 = blockIdx.x * Cfg::kBlockM + warp * kRowsPerWarp;
#pragma unroll 1
  for (int r = row0; r < min(row0 + kRowsPerWarp, seqlen_q); ++r) {
    const float* accum = dq_accum_row<Cfg>(p, batch, q_start, head, r);
    Storage* out = dq + r * p.dq_seq_stride;
    for (int c = 2 * lane; c < Cfg::kHeadDimQk; c += 64) {
      const float hi = c + 1 < Cfg::kHeadDimQk ? accum[c + 1] : 0.f;
      const u32 pair = Element::pack(accum[c] * p.softmax_scale, hi * p.softmax_scale);
      if (Cfg::kAlign >= 4 && c + 1 < Cfg::kHeadDimQk) {
        *reinterpret_cast<u32*>(out + c) = pair;
      } else {
        out[c] = static_cast<Storage>(pair & 0xffffu);
        if (c + 1 < Cfg::kHeadDimQk) out[c + 1] = static_cast<Storage>(pair >> 16);
      }
    }
  }
}

}  // namespace fj
