// Decode's second launch when the keys were split: merges each query row's kv_splits partial
// O and LSE (fp32, from kernels/dec_sm80.cuh) through their LSEs into O and LSE. A warp takes
// one row (batch, head, query row), its lanes a share of the V columns; the weights
// exp(lse_s - lse) go through shared memory once a row. Splits are summed in order, so the
// result does not depend on scheduling. The pass is bound by the latency of its loads: each
// lane holds all its columns and reads kUnroll splits of them at once (a loop that waited
// for each split's load took 31 us for 32 rows of 32 splits on the H200).
//
// Config: Element, kHeadDimV, kWarps (rows a CTA).
#pragma once

#include "../arch/common.cuh"
#include "../attn/mask.cuh"  // the KernelConfig names its Pattern
#include "../tile/element.cuh"
#include "dec_params.cuh"

namespace fj {

enum : int { kMaxKvSplits = 128 };  // the runtime splits no more (runtime/decode_splits.h)

template <class Cfg>
struct DecCombineLayout {
  static constexpr int kThreads = Cfg::kWarps * 32;
  static constexpr int kSharedBytes = 0;  // the weights are static shared memory
};

template <class Cfg>
__device__ __forceinline__ void dec_combine(const DecParams& p) {
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  constexpr float kLog2e = 1.4426950408889634f;
  __shared__ float weights[Cfg::kWarps][kMaxKvSplits];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int splits = p.kv_splits;
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q;
  const long long row = static_cast<long long>(blockIdx.x) * Cfg::kWarps + warp;
  if (row >= rows) return;  // a whole warp: the combine has no CTA-wide barrier
  // row = (batch * heads_q + head) * seqlen_q + q_row, the LSE's layout.
  const int q_row = static_cast<int>(row % p.seqlen_q);
  const int head = static_cast<int>(row / p.seqlen_q % p.heads_q);
  const int batch = static_cast<int>(row / p.seqlen_q / p.heads_q);

  float m = neg_inf();
  for (int s = lane; s < splits; s += 32) m = fmaxf(m, p.lse_partial[s * rows + row]);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  const float base = m == neg_inf() ? 0.f : m;
  float l = 0.f;
  for (int s = lane; s < splits; s += 32) {
    const float w = exp2_approx((p.lse_partial[s * rows + row] - base) * kLog2e);
    weights[warp][s] = w;
    l += w;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) l += __shfl_xor_sync(0xffffffffu, l, offset);
  __syncwarp();
  const float inv_l = l > 0.f ? 1.f / l : 0.f;
  const float* partial = p.o_partial + row * Cfg::kHeadDimV;
  const long long split_stride = rows * Cfg::kHeadDimV;
  constexpr int kCols = (Cfg::kHeadDimV + 31) / 32;  // columns a lane: lane + 32 j
  constexpr int kUnroll = 4;
  float o[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) o[j] = 0.f;
  for (int s0 = 0; s0 < splits; s0 += kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = s0 + u;
      if (s >= splits) break;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int c = lane + 32 * j;
        if (c < Cfg::kHeadDimV) o[j] += weights[warp][s] * partial[s * split_stride + c];
      }
    }
  }
  Storage* out = static_cast<Storage*>(p.o) + batch * p.o_batch_stride + q_row * p.o_seq_stride +
                 head * p.o_head_stride;
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    const int c = lane + 32 * j;
    if (c < Cfg::kHeadDimV) out[c] = static_cast<Storage>(Element::pack(o[j] * inv_l, 0.f) & 0xffffu);
  }
  if (lane == 0 && p.lse != nullptr) p.lse[row] = l > 0.f ? base + logf(l) : neg_inf();
}

}  // namespace fj
