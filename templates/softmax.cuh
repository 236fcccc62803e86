// The per-row work both kernels share, on one 16-row accumulator tile as mma.sync and wgmma
// both leave it: a thread holds rows lane/4 ("half" 0) and lane/4 + 8 (half 1), columns
// 8j + 2 (lane % 4) + {0, 1} of every n8 tile j, in acc[j][2 * half + {0, 1}]. The four
// threads of a quad hold one row between them.
#pragma once

#include "common.cuh"

namespace fj {

// Compiled-in block patterns over query block qb and key block kb (configs/README.md):
// local: |qb - kb| <= window; strided: qb - kb a multiple of stride; global_local: kb <
// global, qb < global, or |qb - kb| <= window. Every kernel's KernelConfig names one.
enum class Pattern { kNone, kLocal, kStrided, kGlobalLocal };

// The keys [begin, end) that any of `rows` query rows from row0 can see: row i sees keys
// up to i + diag (causal) or i + diag + kWindowRight (window), and from i + diag -
// kWindowLeft on (window). Key tiles outside that band are never loaded.
struct KeyRange {
  int begin, end;
};
template <class Cfg>
__device__ __forceinline__ KeyRange visible_keys(int row0, int rows, int seqlen_k, int diag) {
  int end = seqlen_k;
  if (Cfg::kCausal) end = min(end, row0 + rows + diag);
  if (Cfg::kWindow) end = min(end, row0 + rows + diag + Cfg::kWindowRight);
  const int begin = Cfg::kWindow ? max(0, row0 + diag - Cfg::kWindowLeft) : 0;
  return {begin, end};
}

// -inf for the scores of keys a row must not see: past the sequence end, right of the
// (bottom-right aligned) diagonal under causal masking, outside the sliding-window band.
// `row` is the query row of half 0, `key0` the key of column 0, `diag` = seqlen_k - seqlen_q.
template <class Cfg, int kTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kTiles][4], int row, int key0,
                                            int seqlen_k, int diag, int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row + half * 8;
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + j * 8 + (lane % 4) * 2 + e;
        if (key >= seqlen_k || (Cfg::kCausal && key > r + diag) ||
            (Cfg::kWindow && (key > r + diag + Cfg::kWindowRight ||
                              key < r + diag - Cfg::kWindowLeft)))
          s[j][half * 2 + e] = neg_inf();
      }
  }
}

// Does any of `rows` query rows from `row0` see a masked key in the block [key0, key0 +
// block_n)? Blocks inside the band skip mask_scores altogether.
template <class Cfg>
__device__ __forceinline__ bool block_needs_mask(int row0, int rows, int key0, int block_n,
                                                 int seqlen_k, int diag) {
  return key0 + block_n > seqlen_k || (Cfg::kCausal && key0 + block_n - 1 > row0 + diag) ||
         (Cfg::kWindow && (key0 + block_n - 1 > row0 + diag + Cfg::kWindowRight ||
                           key0 < row0 + rows - 1 + diag - Cfg::kWindowLeft));
}

// One step of the online softmax in the exp2 domain: raises the running max by this block's
// scores, turns the scores into P = exp2(scale_log2 * s - max) in place, adds P's row sums
// (this thread's share) to row_sum and returns in alpha the factor the O accumulated so far
// must be multiplied by.
template <int kTiles>
__device__ __forceinline__ void softmax_step(float (&s)[kTiles][4], float (&row_max)[2],
                                             float (&row_sum)[2], float scale_log2,
                                             float (&alpha)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float mx = neg_inf();
#pragma unroll
    for (int j = 0; j < kTiles; ++j) mx = fmaxf(mx, fmaxf(s[j][half * 2], s[j][half * 2 + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(row_max[half], mx * scale_log2);
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

// A 4x4 transpose inside each quad of lanes (q = lane % 4): on entry v[t] holds the pair of
// columns 2q..2q+1 of n8 tile t, on exit the pair of columns 2t..2t+1 of n8 tile q, so that
// a lane holds 8 consecutive columns of its row. Two butterfly steps (lane bits 1, then 0)
// of shuffles and selects, no branch.
__device__ __forceinline__ void quad_transpose(u32 (&v)[4], int q) {
  const bool b1 = q & 2, b0 = q & 1;
  u32 r0 = __shfl_xor_sync(0xffffffffu, b1 ? v[0] : v[2], 2);
  u32 r1 = __shfl_xor_sync(0xffffffffu, b1 ? v[1] : v[3], 2);
  v[0] = b1 ? r0 : v[0];
  v[1] = b1 ? r1 : v[1];
  v[2] = b1 ? v[2] : r0;
  v[3] = b1 ? v[3] : r1;
  r0 = __shfl_xor_sync(0xffffffffu, b0 ? v[0] : v[1], 1);
  r1 = __shfl_xor_sync(0xffffffffu, b0 ? v[2] : v[3], 1);
  v[0] = b0 ? r0 : v[0];
  v[1] = b0 ? v[1] : r0;
  v[2] = b0 ? r1 : v[2];
  v[3] = b0 ? v[3] : r1;
}

// One 16-byte global store, written in PTX: NVVM splits some uint4 stores into four 4-byte
// ones when it cannot prove the 16-byte alignment that the caller guarantees.
__device__ __forceinline__ void st_global_v4(void* ptr, const u32 (&v)[4]) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v[0]), "r"(v[1]),
               "r"(v[2]), "r"(v[3])
               : "memory");
}

// O / l to the output type and LSE = ln(sum exp(scale * s)). `o_rows` points at row 0 of
// this 16-row tile's output (already offset to the first V column of the slice), `row` is
// the tile's first row within the sequence, `v_cols` the valid columns from there.
// A row that saw no key writes O = 0 and LSE = -inf.
// Whole rows of 16-byte aligned output, 128 columns or more, go out 16 bytes a lane, 8
// columns after a transpose inside each quad: a quarter of the store instructions, each
// writing whole 32-byte sectors. On the H200 this cut the sm90 epilogue from about 4000 to
// 2200 cycles a tile at d128 (up to +7% at d128-d256) but cost d64 up to 3.5%
// (bench/NOTES.md entry 16). Other shapes store the accumulator's column pairs as they lie,
// 4 bytes a lane.
template <class Cfg, int kTiles>
__device__ __forceinline__ void store_rows(const float (&o)[kTiles][4], const float (&row_max)[2],
                                           const float (&row_sum)[2], u16* o_rows,
                                           long long o_seq_stride, int row, int seqlen_q,
                                           int v_cols, float* lse_rows, int lane) {
  using Element = typename Cfg::Element;
  constexpr float kLn2 = 0.6931471805599453f;
  constexpr bool kWideStores = Cfg::kAlign >= 16 && kTiles % 4 == 0 && kTiles >= 16;
  const bool wide = kWideStores && v_cols >= kTiles * 8;  // the same in every lane
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float l = row_sum[half];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv_l = l > 0.f ? 1.f / l : 0.f;
    const int r = lane / 4 + half * 8;
    const bool row_valid = row + r < seqlen_q;
    u16* o_row = o_rows + r * o_seq_stride;
    if (wide) {
#pragma unroll
      for (int g = 0; g < kTiles / 4; ++g) {
        u32 v[4];
#pragma unroll
        for (int t = 0; t < 4; ++t)
          v[t] = Element::pack(o[4 * g + t][half * 2] * inv_l, o[4 * g + t][half * 2 + 1] * inv_l);
        quad_transpose(v, lane % 4);  // every lane, valid row or not: the shuffles need all
        if (row_valid) st_global_v4(o_row + (4 * g + lane % 4) * 8, v);
      }
    } else if (row_valid) {
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        const int col = j * 8 + (lane % 4) * 2;
        if (col >= v_cols) continue;
        const u32 pair = Element::pack(o[j][half * 2] * inv_l, o[j][half * 2 + 1] * inv_l);
        if (Cfg::kAlign >= 4 && col + 1 < v_cols) {
          *reinterpret_cast<u32*>(o_row + col) = pair;
        } else {
          o_row[col] = static_cast<u16>(pair & 0xffffu);
          if (col + 1 < v_cols) o_row[col + 1] = static_cast<u16>(pair >> 16);
        }
      }
    }
    if (lse_rows != nullptr && lane % 4 == 0 && row_valid)
      lse_rows[r] = l > 0.f ? (row_max[half] + log2f(l)) * kLn2 : neg_inf();
  }
}

}  // namespace fj
