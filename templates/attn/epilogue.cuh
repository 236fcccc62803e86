// The end of a 16-row tile of O (held as in attn/softmax.cuh): O / l in the output type and
// the row's LSE, written to global memory.
#pragma once

#include "../arch/common.cuh"

namespace fj {

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
                                           const float (&row_sum)[2],
                                           typename Cfg::Element::Storage* o_rows,
                                           long long o_seq_stride, int row, int seqlen_q,
                                           int v_cols, float* lse_rows, int lane) {
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  static_assert(Element::kBytes == 2, "the stores take pack()'s register as two elements");
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
    Storage* o_row = o_rows + r * o_seq_stride;
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
          o_row[col] = static_cast<Storage>(pair & 0xffffu);
          if (col + 1 < v_cols) o_row[col + 1] = static_cast<Storage>(pair >> 16);
        }
      }
    }
    if (lse_rows != nullptr && lane % 4 == 0 && row_valid)
      lse_rows[r] = l > 0.f ? (row_max[half] + log2f(l)) * kLn2 : neg_inf();
  }
}

// scale * acc to the output type, for accumulators that need no row statistics (the
// backward's dQ, dK, dV): `rows` points at row 0 of this 16-row tile (offset to its first
// column), `row` is the tile's first row within the sequence, `rows_valid` and `cols_valid`
// bound what is written.
template <class Cfg, int kTiles>
__device__ __forceinline__ void store_scaled_rows(const float (&acc)[kTiles][4], float scale,
                                                  typename Cfg::Element::Storage* rows,
                                                  long long seq_stride, int row, int rows_valid,
                                                  int cols_valid, int lane) {
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  static_assert(Element::kBytes == 2, "the stores take pack()'s register as two elements");
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = lane / 4 + half * 8;
    if (row + r >= rows_valid) continue;
    Storage* out = rows + r * seq_stride;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int col = j * 8 + (lane % 4) * 2;
      if (col >= cols_valid) continue;
      const u32 pair = Element::pack(acc[j][half * 2] * scale, acc[j][half * 2 + 1] * scale);
      if (Cfg::kAlign >= 4 && col + 1 < cols_valid) {
        *reinterpret_cast<u32*>(out + col) = pair;
      } else {
        out[col] = static_cast<Storage>(pair & 0xffffu);
        if (col + 1 < cols_valid) out[col + 1] = static_cast<Storage>(pair >> 16);
      }
    }
  }
}

}  // namespace fj
