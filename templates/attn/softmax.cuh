// The per-row work both kernels share, on one 16-row accumulator tile as mma.sync and wgmma
// both leave it: a thread holds rows lane/4 ("half" 0) and lane/4 + 8 (half 1), columns
// 8j + 2 (lane % 4) + {0, 1} of every n8 tile j, in acc[j][2 * half + {0, 1}]. The four
// threads of a quad hold one row between them.
#pragma once

#include "../arch/common.cuh"

namespace fj {

// One step of the online softmax in the exp2 domain: raises the running max by this block's
// scores, turns the scores into P = exp2(scale_log2 * s - max) in place, adds P's row sums
// (this thread's share) to row_sum and returns in alpha the factor the O accumulated so far
// must be multiplied by. With kMaxSlack > 0 the running max stays put while the block's max
// exceeds it by at most kMaxSlack (P then reaches 2^kMaxSlack, far inside fp16's and fp32's
// range); the result says whether either row's max moved, i.e. whether alpha is not 1.
template <int kTiles, int kMaxSlack = 0>
__device__ __forceinline__ bool softmax_step(float (&s)[kTiles][4], float (&row_max)[2],
                                             float (&row_sum)[2], float scale_log2,
                                             float (&alpha)[2]) {
  bool raised = false;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float mx = neg_inf();
#pragma unroll
    for (int j = 0; j < kTiles; ++j) mx = fmaxf(mx, fmaxf(s[j][half * 2], s[j][half * 2 + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    float m_new = fmaxf(row_max[half], mx * scale_log2);
    if constexpr (kMaxSlack > 0) {
      if (m_new <= row_max[half] + kMaxSlack) m_new = row_max[half];
    }
    raised |= m_new != row_max[half];
    // A row that has seen no key yet keeps m = -inf; use 0 as its base so that
    // exp2(-inf - base) = 0 instead of NaN.
    const float base = m_new == neg_inf() ? 0.f : m_new;
    alpha[half] = exp2_approx(row_max[half] - base);
    row_max[half] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pr = exp2_approx(fmaf(s[j][half * 2 + e], scale_log2, -base));
        s[j][half * 2 + e] = pr;
        sum += pr;
      }
    row_sum[half] = row_sum[half] * alpha[half] + sum;
  }
  return raised;
}

template <int kTiles>
__device__ __forceinline__ void rescale_rows(float (&o)[kTiles][4], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    o[j][0] *= alpha[0];
    o[j][1] *= alpha[0];
    o[j][2] *= alpha[1];
    o[j][3] *= alpha[1];
  }
}

// The backward's P from S, its rows' LSE known (log2 domain): P = exp2(scale_log2 s - LSE),
// in S's registers.
template <int kTiles>
__device__ __forceinline__ void probabilities_of_rows(float (&s)[kTiles][4], float scale_log2,
                                                      const float (&lse_log2)[2]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = exp2_approx(fmaf(s[j][e], scale_log2, -lse_log2[e / 2]));
}

// dS = P (dP - D) from P and dP, its rows' D known, in dP's registers.
template <int kTiles>
__device__ __forceinline__ void score_gradients_of_rows(float (&dp)[kTiles][4],
                                                        const float (&p)[kTiles][4],
                                                        const float (&d)[2]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dp[j][e] = p[j][e] * (dp[j][e] - d[e / 2]);
}

}  // namespace fj
