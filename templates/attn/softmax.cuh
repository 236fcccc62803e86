// The per-row work both kernels share, on one 16-row accumulator tile as mma.sync and wgmma
// both leave it: a thread holds rows lane/4 ("half" 0) and lane/4 + 8 (half 1), columns
// 8j + 2 (lane % 4) + {0, 1} of every n8 tile j, in acc[j][2 * half + {0, 1}]. The four
// threads of a quad hold one row between them. With kColumns the rows are the tile's columns
// (decode's 8-row tile holds S^T, its query rows as mma.sync's n8): a thread holds columns
// 2 (lane % 4) + {0, 1} in acc[j][2 * half + {0, 1}], and the eight threads of equal
// lane % 4 hold one column between them.
#pragma once

#include "../arch/common.cuh"

namespace fj {

// The state before the first step, for kMT m16 tiles of rows: O = 0, running max -inf (no
// key seen), row sums 0.
template <int kMT, int kOT>
__device__ __forceinline__ void start_rows(float (&o)[kMT][kOT][4], float (&row_max)[kMT][2],
                                           float (&row_sum)[kMT][2]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int ot = 0; ot < kOT; ++ot)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][ot][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = neg_inf();
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
}

// One step of the online softmax in the exp2 domain: raises the running max by this block's
// scores, turns the scores into P = exp2(scale_log2 * s - max) in place, adds P's row sums
// (this thread's share) to row_sum and returns in alpha the factor the O accumulated so far
// must be multiplied by. With kMaxSlack > 0 the running max stays put while the block's max
// exceeds it by at most kMaxSlack (P then reaches 2^kMaxSlack, far inside fp16's and fp32's
// range); the result says whether either row's max moved, i.e. whether alpha is not 1.
// Statistic i (0, 1) is row half i's, or with kColumns column 2 (lane % 4) + i's.
template <int kTiles, int kMaxSlack = 0, bool kColumns = false>
__device__ __forceinline__ bool softmax_step(float (&s)[kTiles][4], float (&row_max)[2],
                                             float (&row_sum)[2], float scale_log2,
                                             float (&alpha)[2]) {
  // The accumulator of statistic i's e-th value (e = 0, 1) in each tile.
  auto at = [](int i, int e) { return kColumns ? e * 2 + i : i * 2 + e; };
  bool raised = false;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx = neg_inf();
#pragma unroll
    for (int j = 0; j < kTiles; ++j) mx = fmaxf(mx, fmaxf(s[j][at(i, 0)], s[j][at(i, 1)]));
    if constexpr (kColumns) {
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
    } else {
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    }
    float m_new = fmaxf(row_max[i], mx * scale_log2);
    if constexpr (kMaxSlack > 0) {
      if (m_new <= row_max[i] + kMaxSlack) m_new = row_max[i];
    }
    raised |= m_new != row_max[i];
    // A row that has seen no key yet keeps m = -inf; use 0 as its base so that
    // exp2(-inf - base) = 0 instead of NaN.
    const float base = m_new == neg_inf() ? 0.f : m_new;
    alpha[i] = exp2_approx(row_max[i] - base);
    row_max[i] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pr = exp2_approx(fmaf(s[j][at(i, e)], scale_log2, -base));
        s[j][at(i, e)] = pr;
        sum += pr;
      }
    row_sum[i] = row_sum[i] * alpha[i] + sum;
  }
  return raised;
}

template <int kTiles, bool kColumns = false>
__device__ __forceinline__ void rescale_rows(float (&o)[kTiles][4], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] *= alpha[kColumns ? e % 2 : e / 2];
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
