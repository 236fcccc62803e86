// Tile rules every kernel path shares: head dims padded to the MMA granularity, the split of
// wide V over CTAs, and how a block mask constrains the tiles.
#pragma once

#include <string>

#include "flashjit/flashjit.h"

namespace flashjit::gen {

// Head dims padded to the MMA granularity, and the split of the V columns over CTAs: one
// CTA holds at most 256 O columns in registers (128 fp32 a thread), wider V is split.
struct PaddedDims {
  int d_qk_pad = 0;
  int d_v_pad = 0;
  int dv_splits = 1;
  int dv_slice = 0;
  int element_bytes = 2;  // of the spec's dtype (generator/element_types.h)
};
PaddedDims padded_dims(const Spec& spec);
// How a path splits the output columns over CTAs: each of `splits` CTAs of one row block
// computes dk_slice columns of its qk-wide output (dK, dQ) and dv_slice of its v-wide one
// (O, dV), slice s starting at column s * slice (padded widths, multiples of 16).
struct ColumnSplit {
  int dk_slice = 0;
  int dv_slice = 0;
  int splits = 1;
};
// The forward's split: all qk columns, the V columns in dv_splits slices of dv_slice.
ColumnSplit forward_column_split(const PaddedDims& dims);

// Why `tiles` cannot serve the block mask of `spec` ("" when they can, or when the spec has
// no block mask): every CTA's query rows must lie in one mask query block (block_m divides
// block_q) and every key tile in one mask key block (block_n divides block_k), so that a CTA
// visits whole tiles of one list.
std::string mask_tiles_problem(const Spec& spec, const Tiles& tiles);

// `tiles` shrunk until they fit the spec's block mask (unchanged without one): block_m and
// block_n become the largest multiples of 16 not above them that divide block_q / block_k,
// and warps halve until each warp owns whole 16-row tiles and at least the rows it owned.
Tiles fit_tiles_to_mask(const Spec& spec, Tiles tiles);

// "they need N bytes of shared memory; T allows M" when `bytes` is over the target's limit.
std::string shared_memory_problem(int bytes, const std::string& target);

int round_up(int x, int multiple);
int ceil_div(int x, int y);


// "m128n64w4s3", for messages and tables.
std::string tiles_label(const Tiles& tiles);

}  // namespace flashjit::gen
