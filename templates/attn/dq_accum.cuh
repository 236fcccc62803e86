// The backward's fp32 dQ accumulator when the dK/dV kernel accumulates dQ: bwd_dkdv_dq_sm90
// adds each step's tile to it with bulk reductions and bwd_dq_convert reads it into dQ.
#pragma once

#include "../arch/common.cuh"
#include "params.cuh"
#include "sequence.cuh"
#include "../tile/budgets.cuh"

namespace fj {

// dq_accum is a block of kDqTileRows rows a (query head, query tile), each the shares of the
// kernel's column splits and consumers side by side (kDqTileRows x a share's width floats
// each), so that a share is one contiguous range for one bulk reduction. Sequence b's tiles
// start at block q_start / kDqTileRows + b of its head (never overlapping the sequence
// before), a head's blocks rows / kDqTileRows + batch + 1 apart, where rows is the packed
// total (varlen) or batch * seqlen_q. The host sizes it by the same rule
// (runtime/backward_params.cpp). The ordered variant's dq_turns holds kDqTurnsPerBlock
// counters a block, in the blocks' order: consumer c's share counts on counter c (at 128 rows
// a step a block is one consumer's, on counter 0).
enum : int { kDqTileRows = budget::kDqAccumTileRows };
enum : int { kDqTurnsPerBlock = budget::kDqTurnsPerBlock };
template <bool kVarlen>
__device__ __forceinline__ long long dq_tile_index(const AttnParams& p, const Sequence& s,
                                                   int batch, int head, int m0) {
  const long long rows = kVarlen ? p.cu_seqlens_q[p.batch] : 1LL * p.batch * p.seqlen_q;
  const long long q_start = kVarlen ? s.q_start : 1LL * batch * p.seqlen_q;
  return head * (rows / kDqTileRows + p.batch + 1) + q_start / kDqTileRows + batch +
         m0 / kDqTileRows;
}

// Where element (row, col) of an N-column share of a block lies in it: the order of a wgmma
// accumulator's registers (64 rows, N columns), so that each store instruction of a warp
// writes 256 contiguous bytes when bwd_dkdv_dq_sm90 stages its tile.
template <int N>
__device__ __forceinline__ int dq_share_offset(int row, int col) {
  const int warp = row / 16, half = row % 16 / 8, lane = row % 8 * 4 + col % 8 / 2;
  return (((warp * 2 + half) * (N / 8) + col / 8) * 32 + lane) * 2 + col % 2;
}

// Where element (row, col) of one column split's kCols-wide part of a block lies: the first
// consumer's kCols0 columns as one share, then the rest as another (bwd_dkdv_dq_sm90 splits
// the columns so at 64 query rows a step; at 128 a consumer stages all of them in this order).
template <int kCols, int kCols0>
__device__ __forceinline__ int dq_block_offset(int row, int col) {
  return col < kCols0 ? dq_share_offset<kCols0>(row, col)
                      : kCols0 * kDqTileRows + dq_share_offset<kCols - kCols0>(row, col - kCols0);
}

}  // namespace fj
