// How a warp of decode's split kernel (kernels/dec_sm80.cuh) holds its packed rows: their O,
// running max and sum, the products of a key tile and the online softmax, and where its O and
// row statistics go for the warps' merge. The kernel's flow (pipeline, paging, merge) is the
// same for both layouts:
//   DecRows<Cfg, false>: m16 tiles of rows, S = Q K^T and O += P V as the forward runs them.
//   DecRows<Cfg, true>:  8 rows, the products transposed (S^T = K Q^T, O^T += V^T P^T) with
//                        the rows as mma.sync's n8, where an m16 tile of them was half or
//                        three quarters padding for one new row of a GQA group of 4 or 8.
#pragma once

#include "../arch/sm80.cuh"
#include "../attn/mask.cuh"
#include "../attn/softmax.cuh"
#include "../tile/warp_products.cuh"
#include "dec_sm80_layout.cuh"

namespace fj {

template <class Cfg, bool kTransposed>
struct DecRows;

template <class Cfg>
struct DecRows<Cfg, false> {
  using L = DecSm80Layout<Cfg>;
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  static constexpr bool kHeldQueries = false;  // Q is read from shared memory every k16 step
  static constexpr int kMT = Cfg::kBlockM / 16;  // m16 tiles of rows
  static constexpr int kST = L::kWarpKeys / 8;   // n8 tiles of S
  static constexpr int kOT = Cfg::kDvSlice / 8;  // n8 tiles of O

  float acc_o[kMT][kOT][4];
  float row_max[kMT][2];  // this warp's running max of scale*log2(e)*s over its keys
  float row_sum[kMT][2];  // this thread's share of this warp's row sum
  int q_rows[kMT][2];     // the query row of each of this thread's accumulator rows

  __device__ __forceinline__ DecRows() { start_rows(acc_o, row_max, row_sum); }

  // Packed rows past the end repeat the last query row: their scores are never stored.
  __device__ __forceinline__ void find_query_rows(int r0, int packed_rows, int group, int lane) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        q_rows[mt][half] = min(r0 + mt * 16 + lane / 4 + half * 8, packed_rows - 1) / group;
  }

  // One key tile: this warp's kWarpKeys keys from `warp_key0` (key `key0` of the cache).
  __device__ __forceinline__ void tile(const Storage* s_q, const Storage* tile_k,
                                       const Storage* tile_v, int warp_key0, int key0,
                                       bool masked, int seqlen_k, int diag, float scale_log2,
                                       int lane) {
    // ---- S = Q K^T over this warp's keys
    float s[kMT][kST][4];
    warp_scores<Element, kMT, kST, L::kQkSteps, L::kQkStride>(s, s_q, 0, tile_k, warp_key0, lane);

    // ---- mask: the cache's end, the causal diagonal and the window, per packed row
    if (masked) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        mask_scores_of_rows<Cfg>(s[mt], q_rows[mt], key0, seqlen_k, diag, lane);
    }

    // ---- online softmax of this warp's keys
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      float alpha[2];
      const bool raised =
          softmax_step<kST, L::kMaxSlack>(s[mt], row_max[mt], row_sum[mt], scale_log2, alpha);
      if (__any_sync(0xffffffffu, raised)) rescale_rows(acc_o[mt], alpha);
    }

    // ---- O += P V over this warp's keys
    warp_values<Element, kMT, kST, kOT, L::kVStride>(acc_o, s, tile_v, warp_key0, lane);
  }

  // This warp's O rows, row maxima and row sums to the merge's [warp][row] arrays.
  __device__ __forceinline__ void store_merge(float* m_o, float* m_max, float* m_sum, int warp,
                                              int lane) const {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = mt * 16 + lane / 4 + half * 8;
        float* o_row = m_o + (warp * Cfg::kBlockM + row) * L::kMergeStride;
#pragma unroll
        for (int ot = 0; ot < kOT; ++ot) {
          const int col = ot * 8 + (lane % 4) * 2;
          o_row[col] = acc_o[mt][ot][half * 2];
          o_row[col + 1] = acc_o[mt][ot][half * 2 + 1];
        }
        float l = row_sum[mt][half];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (lane % 4 == 0) {
          m_max[warp * Cfg::kBlockM + row] = row_max[mt][half];
          m_sum[warp * Cfg::kBlockM + row] = l;
        }
      }
  }
};

// A thread holds columns (rows) 2 (lane % 4) + {0, 1} of S^T and O^T, in accumulator e = 0, 1
// of each half: S^T's keys lane / 4 + {0, 8} of each m16 tile, O^T's V columns lane / 4 +
// {0, 8} of each m16 tile.
template <class Cfg>
struct DecRows<Cfg, true> {
  using L = DecSm80Layout<Cfg>;
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  static_assert(Cfg::kBlockM == 8, "the transposed products hold one n8 tile of rows");
  static constexpr bool kHeldQueries = true;  // Q^T's fragments read once (read_queries)
  static constexpr int kKT = L::kWarpKeys / 16;  // m16 tiles of keys (S^T's rows)
  static constexpr int kVT = Cfg::kDvSlice / 16;  // m16 tiles of V columns (O^T's rows)

  u32 q_frag[L::kQkSteps][2];  // Q^T's B fragments, every k16 step
  float acc_o[kVT][4];
  float row_max[2];  // as DecRows<Cfg, false>'s, of this thread's two rows
  float row_sum[2];
  int q_rows[2];

  __device__ __forceinline__ DecRows() {
#pragma unroll
    for (int vt = 0; vt < kVT; ++vt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[vt][e] = 0.f;
    row_max[0] = row_max[1] = neg_inf();
    row_sum[0] = row_sum[1] = 0.f;
  }

  __device__ __forceinline__ void find_query_rows(int r0, int packed_rows, int group, int lane) {
#pragma unroll
    for (int e = 0; e < 2; ++e)
      q_rows[e] = min(r0 + (lane % 4) * 2 + e, packed_rows - 1) / group;
  }

  // Q's tile must have landed in shared memory.
  __device__ __forceinline__ void read_queries(const Storage* s_q, int lane) {
    warp_query_fragments<Element, L::kQkSteps, L::kQkStride>(q_frag, s_q, lane);
  }

  __device__ __forceinline__ void tile(const Storage*, const Storage* tile_k,
                                       const Storage* tile_v, int warp_key0, int key0,
                                       bool masked, int seqlen_k, int diag, float scale_log2,
                                       int lane) {
    float s[kKT][4];
    warp_scores_transposed<Element, kKT, L::kQkSteps, L::kQkStride>(s, q_frag, tile_k,
                                                                    warp_key0, lane);
    if (masked) mask_scores_of_columns<Cfg>(s, q_rows, key0, seqlen_k, diag, lane);
    float alpha[2];
    const bool raised =
        softmax_step<kKT, L::kMaxSlack, true>(s, row_max, row_sum, scale_log2, alpha);
    if (__any_sync(0xffffffffu, raised)) rescale_rows<kVT, true>(acc_o, alpha);
    warp_values_transposed<Element, kKT, kVT, L::kVStride>(acc_o, s, tile_v, warp_key0, lane);
  }

  __device__ __forceinline__ void store_merge(float* m_o, float* m_max, float* m_sum, int warp,
                                              int lane) const {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int row = (lane % 4) * 2 + e;
      float* o_row = m_o + (warp * Cfg::kBlockM + row) * L::kMergeStride;
#pragma unroll
      for (int vt = 0; vt < kVT; ++vt)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          o_row[vt * 16 + half * 8 + lane / 4] = acc_o[vt][half * 2 + e];
      float l = row_sum[e];
      l += __shfl_xor_sync(0xffffffffu, l, 4);
      l += __shfl_xor_sync(0xffffffffu, l, 8);
      l += __shfl_xor_sync(0xffffffffu, l, 16);
      if (lane < 4) {
        m_max[warp * Cfg::kBlockM + row] = row_max[e];
        m_sum[warp * Cfg::kBlockM + row] = l;
      }
    }
  }
};

}  // namespace fj
