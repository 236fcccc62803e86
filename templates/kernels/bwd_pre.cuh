// The backward's first launch: D = rowsum(dO * O) in fp32 for every query row and head, which
// both gradient kernels subtract from dP (dS = P * (dP - D)). A warp takes one row at a time,
// its lanes a share of the V columns each; memory-bound, so elements are read one by one at
// whatever alignment the call has.
//
// Config: Element, kHeadDimV, kBlockM (rows a CTA), kWarps, kVarlen.
#pragma once

#include "../arch/common.cuh"
#include "../attn/mask.cuh"  // the KernelConfig names its Pattern
#include "../tile/element.cuh"
#include "bwd_params.cuh"

namespace fj {

template <class Cfg>
struct BwdPreLayout {
  static constexpr int kThreads = Cfg::kWarps * 32;
  static constexpr int kSharedBytes = 0;
  static_assert(Cfg::kBlockM % Cfg::kWarps == 0, "each warp owns whole rows");
};

template <class Cfg>
__device__ __forceinline__ void bwd_pre(const BwdParams& p) {
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = blockIdx.y, batch = blockIdx.z;
  constexpr bool varlen = Cfg::kVarlen;
  const int q_start = varlen ? p.cu_seqlens_q[batch] : 0;
  const int seqlen_q = varlen ? p.cu_seqlens_q[batch + 1] - q_start : p.seqlen_q;
  const long long o_row0 = varlen ? q_start * p.o_seq_stride : batch * p.o_batch_stride;
  const long long do_row0 = varlen ? q_start * p.do_seq_stride : batch * p.do_batch_stride;
  // D is in LSE's layout: [batch, heads_q, seqlen_q], or with cu_seqlens [heads_q, total_q].
  const long long d_row0 =
      varlen ? static_cast<long long>(head) * p.cu_seqlens_q[p.batch] + q_start
             : (static_cast<long long>(batch) * p.heads_q + head) * p.seqlen_q;
  const Storage* o = static_cast<const Storage*>(p.o) + o_row0 + head * p.o_head_stride;
  const Storage* d_o = static_cast<const Storage*>(p.d_o) + do_row0 + head * p.do_head_stride;
  constexpr int kRowsPerWarp = Cfg::kBlockM / Cfg::kWarps;
  const int row0 = blockIdx.x * Cfg::kBlockM + warp * kRowsPerWarp;
#pragma unroll 1
  for (int r = row0; r < min(row0 + kRowsPerWarp, seqlen_q); ++r) {
    const Storage* o_row = o + r * p.o_seq_stride;
    const Storage* do_row = d_o + r * p.do_seq_stride;
    float sum = 0.f;
    for (int c = lane; c < Cfg::kHeadDimV; c += 32)
      sum += Element::to_float(o_row[c]) * Element::to_float(do_row[c]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) p.d_rows[d_row0 + r] = sum;
  }
}

}  // namespace fj
