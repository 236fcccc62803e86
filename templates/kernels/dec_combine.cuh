// Decode's second launch when the keys were split: merges each query row's kv_splits partial
// O and LSE (fp32, from kernels/dec_sm80.cuh) through their LSEs into O and LSE. A CTA takes
// one row (batch, head, query row): its threads find the LSE's max and the weights
// exp(lse_s - lse) together (in shared memory), then each warp sums its share of the splits
// (warp w: splits w, w + kWarps, ...) over all the V columns (a lane's: lane + 32 j), and
// the warps' sums are added in warp order. Every order is fixed, so the result does not
// depend on scheduling. The pass is bound by the latency of its loads, so the splits are
// spread over a CTA's warps and every lane keeps kUnroll splits of its columns in flight:
// with a warp a row and one split's columns at a time, the combine of 32 rows of 64 splits
// (d128) took 25 us under ncu, over twice the split kernel before it.
//
// Config: Element, kHeadDimV, kWarps (warps a row).
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
  static constexpr int kSharedBytes = 0;  // the weights and sums are static shared memory
};

template <class Cfg>
__device__ __forceinline__ void dec_combine(const DecParams& p) {
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  using L = DecCombineLayout<Cfg>;
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr int kW = Cfg::kWarps;
  constexpr int kCols = (Cfg::kHeadDimV + 31) / 32;  // columns a lane: lane + 32 j
  constexpr int kUnroll = kCols >= 32 ? 1 : 32 / kCols;  // splits a lane has in flight
  __shared__ float weights[kMaxKvSplits];
  __shared__ float warp_values[kW];
  __shared__ float sums[kW][kCols * 32];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int splits = p.kv_splits;
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q;
  const long long row = blockIdx.x;
  // row = (batch * heads_q + head) * seqlen_q + q_row, the LSE's layout.
  const int q_row = static_cast<int>(row % p.seqlen_q);
  const int head = static_cast<int>(row / p.seqlen_q % p.heads_q);
  const int batch = static_cast<int>(row / p.seqlen_q / p.heads_q);

  // The CTA's max of the splits' LSEs, then the weights and their sum (warp sums in order).
  auto over_warps = [&](float v, bool is_max) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, v, offset);
      v = is_max ? fmaxf(v, other) : v + other;
    }
    if (lane == 0) warp_values[warp] = v;
    __syncthreads();
    float all = warp_values[0];
#pragma unroll
    for (int w = 1; w < kW; ++w) all = is_max ? fmaxf(all, warp_values[w]) : all + warp_values[w];
    __syncthreads();  // warp_values is read before the next call writes it
    return all;
  };
  wait_for_previous_launch();  // the split kernel's partial O and LSE
  float m = neg_inf();
  for (int s = tid; s < splits; s += L::kThreads) m = fmaxf(m, p.lse_partial[s * rows + row]);
  m = over_warps(m, true);
  const float base = m == neg_inf() ? 0.f : m;
  float l = 0.f;
  for (int s = tid; s < splits; s += L::kThreads) {
    const float w = exp2_approx((p.lse_partial[s * rows + row] - base) * kLog2e);
    weights[s] = w;
    l += w;
  }
  l = over_warps(l, false);  // its barriers also publish the weights
  const float inv_l = l > 0.f ? 1.f / l : 0.f;

  const float* partial = p.o_partial + row * Cfg::kHeadDimV;
  const long long split_stride = rows * Cfg::kHeadDimV;
  float o[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) o[j] = 0.f;
  for (int s0 = warp; s0 < splits; s0 += kW * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = s0 + u * kW;
      if (s >= splits) break;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int c = lane + 32 * j;
        if (c < Cfg::kHeadDimV) o[j] += weights[s] * partial[s * split_stride + c];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kCols; ++j) sums[warp][lane + 32 * j] = o[j];
  __syncthreads();

  Storage* out = static_cast<Storage*>(p.o) + batch * p.o_batch_stride + q_row * p.o_seq_stride +
                 head * p.o_head_stride;
  for (int c = tid; c < Cfg::kHeadDimV; c += L::kThreads) {
    float sum = sums[0][c];
#pragma unroll
    for (int w = 1; w < kW; ++w) sum += sums[w][c];
    out[c] = static_cast<Storage>(Element::pack(sum * inv_l, 0.f) & 0xffffu);
  }
  if (tid == 0 && p.lse != nullptr) p.lse[row] = l > 0.f ? base + logf(l) : neg_inf();
}

}  // namespace fj
