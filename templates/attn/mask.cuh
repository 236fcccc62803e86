// The masks on scores: which keys a block of query rows can see (causal, sliding window),
// -inf for the scores it must not, and the compiled-in block patterns. Scores are held as in
// attn/softmax.cuh.
#pragma once

#include "../arch/common.cuh"

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

// The query rows [begin, end) that see any of `keys` keys from key0 (the transpose of
// visible_keys, for the backward's walk over the queries of a key block): key j is seen by
// rows from j - diag (causal) or j - diag - kWindowRight (window), up to j - diag +
// kWindowLeft (window).
template <class Cfg>
__device__ __forceinline__ KeyRange visible_queries(int key0, int keys, int seqlen_q, int diag) {
  int begin = 0;
  if (Cfg::kCausal) begin = max(begin, key0 - diag);
  if (Cfg::kWindow) begin = max(begin, key0 - diag - Cfg::kWindowRight);
  const int end = Cfg::kWindow ? min(seqlen_q, key0 + keys - diag + Cfg::kWindowLeft) : seqlen_q;
  return {begin, end};
}

// Is `key` hidden from query row `row`: past the sequence end, right of the (bottom-right
// aligned) diagonal under causal masking, or outside the sliding-window band? `diag` =
// seqlen_k - seqlen_q.
template <class Cfg>
__device__ __forceinline__ bool hidden_key(int key, int row, int seqlen_k, int diag) {
  return key >= seqlen_k || (Cfg::kCausal && key > row + diag) ||
         (Cfg::kWindow &&
          (key > row + diag + Cfg::kWindowRight || key < row + diag - Cfg::kWindowLeft));
}

// -inf for the scores of hidden keys. `rows` are the query rows of halves 0 and 1 (decode's
// packed rows are not 8 apart), `key0` the key of column 0.
template <class Cfg, int kTiles>
__device__ __forceinline__ void mask_scores_of_rows(float (&s)[kTiles][4], const int (&rows)[2],
                                                    int key0, int seqlen_k, int diag, int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = rows[half];
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + j * 8 + (lane % 4) * 2 + e;
        if (hidden_key<Cfg>(key, r, seqlen_k, diag)) s[j][half * 2 + e] = neg_inf();
      }
  }
}

// The same for S^T as decode's 8-row tile holds it (attn/softmax.cuh's kColumns): kTiles m16
// tiles of keys from `key0` down the rows, `rows` the query rows of this thread's columns
// 2 (lane % 4) + {0, 1}.
template <class Cfg, int kTiles>
__device__ __forceinline__ void mask_scores_of_columns(float (&s)[kTiles][4],
                                                       const int (&rows)[2], int key0,
                                                       int seqlen_k, int diag, int lane) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int key = key0 + j * 16 + half * 8 + lane / 4;
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (hidden_key<Cfg>(key, rows[e], seqlen_k, diag)) s[j][half * 2 + e] = neg_inf();
    }
}

// The same for an m16 tile of consecutive rows whose half 0 is query row `row`.
template <class Cfg, int kTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kTiles][4], int row, int key0,
                                            int seqlen_k, int diag, int lane) {
  const int rows[2] = {row, row + 8};
  mask_scores_of_rows<Cfg>(s, rows, key0, seqlen_k, diag, lane);
}

// mask_scores for the transposed tile S^T (rows are keys, columns query rows), as the
// backward's dK/dV kernels hold it: `key` is the key of half 0, `row0` the query of column 0.
// With kMaskKeyEnd, keys from `key_end` on are masked too. The dK/dV kernels need not (their
// rows of dK and dV are never stored); the dQ-accumulating kernel sums dS K over the tile's
// keys, and with cu_seqlens those rows of K are the next sequence's.
template <class Cfg, bool kMaskKeyEnd = false, int kTiles>
__device__ __forceinline__ void mask_scores_transposed(float (&s)[kTiles][4], int key, int row0,
                                                       int diag, int lane, int key_end = 0) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int kj = key + half * 8;
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = row0 + j * 8 + (lane % 4) * 2 + e;
        if ((kMaskKeyEnd && kj >= key_end) || (Cfg::kCausal && kj > r + diag) ||
            (Cfg::kWindow && (kj > r + diag + Cfg::kWindowRight || kj < r + diag - Cfg::kWindowLeft)))
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

}  // namespace fj
