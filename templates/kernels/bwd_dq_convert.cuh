// The backward's last launch when the dK/dV kernel accumulated dQ (bwd_dkdv_dq_sm90): dQ =
// softmax_scale * dq_accum, converted to the element type and written in dQ's layout. A CTA
// is kBlockM rows of one (batch, head) and one of the dK/dV kernel's column splits; a warp
// takes one row at a time, its lanes a share of the split's columns each. Memory-bound, and
// dQ is written element by element at whatever alignment the call has.
//
// Config: Element, kHeadDimQk, kDkSlice and kDvSplits (the dK/dV kernel's column split),
// kBlockM (rows a CTA), kWarps, kVarlen.
#pragma once

#include "../arch/common.cuh"
#include "../attn/dq_accum.cuh"
#include "../attn/mask.cuh"  // the KernelConfig names its Pattern
#include "../attn/sequence.cuh"
#include "../tile/budgets.cuh"
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
  constexpr int kCols0 = budget::bwd_dkdv_sm90_dq_cols0(Cfg::kDkSlice);  // the first share's
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = blockIdx.y, batch = blockIdx.z / Cfg::kDvSplits;
  const int split = blockIdx.z % Cfg::kDvSplits;
  const Sequence seq = sequence_of<Cfg::kVarlen>(p, batch);
  const long long dq_row0 =
      Cfg::kVarlen ? seq.q_start * p.dq_seq_stride : batch * p.dq_batch_stride;
  Storage* d_q = static_cast<Storage*>(p.d_q) + dq_row0 + head * p.dq_head_stride;
  constexpr int kRowsPerWarp = Cfg::kBlockM / Cfg::kWarps;
  const int row0 = blockIdx.x * Cfg::kBlockM + warp * kRowsPerWarp;
#pragma unroll 1
  for (int r = row0; r < min(row0 + kRowsPerWarp, seq.seqlen_q); ++r) {
    const int m0 = r / kDqTileRows * kDqTileRows, row = r - m0;
    const float* block = p.dq_accum + dq_tile_index<Cfg::kVarlen>(p, seq, batch, head, m0) *
                                          kDqTileRows * (Cfg::kDvSplits * Cfg::kDkSlice);
    Storage* dq_row = d_q + r * p.dq_seq_stride;
    for (int c = lane; c < Cfg::kDkSlice; c += 32) {
      const int col = split * Cfg::kDkSlice + c;
      if (col >= Cfg::kHeadDimQk) break;
      const float acc = block[split * Cfg::kDkSlice * kDqTileRows +
                              dq_block_offset<Cfg::kDkSlice, kCols0>(row, c)];
      dq_row[col] = static_cast<Storage>(Element::pack(acc * p.softmax_scale, 0.f) & 0xffffu);
    }
  }
}

}  // namespace fj
