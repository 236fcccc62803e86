// Each kernel path's shared-memory footprint, tile rules and built-in choice of tiles
// (tile_heuristic.cpp: sm80, sm90_tiles.cpp: sm90).
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
};
PaddedDims padded_dims(const Spec& spec);

// Bytes of dynamic shared memory the sm80 kernel needs (mirrors Sm80FwdLayout in
// templates/kernels/fwd_sm80.cuh; the emitted source static_asserts that both agree).
int sm80_shared_bytes(int d_qk_pad, int dv_slice, const Tiles& tiles);

// Why `tiles` cannot run the sm80 kernel on `target` ("" when they can).
std::string sm80_tiles_problem(int d_qk_pad, int dv_slice, const Tiles& tiles,
                               const std::string& target);

Tiles sm80_default_tiles(const Spec& spec, const std::string& target);

// The sm90 kernel: 128 query rows (two consumer warp groups of 64) and 12 warps, always.
inline constexpr int kSm90BlockM = 128;
inline constexpr int kSm90Warps = 12;
// Registers a consumer thread may give to O, S and P: 240 (setmaxnreg) minus what the
// descriptors, addresses, row statistics and loop state need.
inline constexpr int kSm90MaxAccumulatorRegisters = 200;
int sm90_shared_bytes(int d_qk_pad, int dv_slice, const Tiles& tiles);
int sm90_consumer_registers(int dv_slice, const Tiles& tiles);
std::string sm90_tiles_problem(int d_qk_pad, int dv_slice, const Tiles& tiles,
                               const std::string& target);
// The sm90 kernel's built-in tiles for `spec`; with a block mask, a block_n that divides
// its block_k.
Tiles sm90_default_tiles(const Spec& spec, const std::string& target);
// Can the sm90 kernel serve the mask of `spec`? Every mask but varlen (a plan variant, see
// varlen_variant); a block mask only when its query blocks hold whole 128-row CTAs
// (block_q a multiple of kSm90BlockM), as mask_tiles_problem requires. Its key blocks, a
// multiple of 16, always admit a block_n.
bool sm90_serves_mask(const Spec& spec);
// Why `tiles` cannot serve the block mask of `spec` ("" when they can, or when the spec has
// no block mask): every CTA's query rows must lie in one mask query block (block_m divides
// block_q) and every key tile in one mask key block (block_n divides block_k), so that a CTA
// visits whole tiles of one list.
std::string mask_tiles_problem(const Spec& spec, const Tiles& tiles);

// `tiles` shrunk until they fit the spec's block mask (unchanged without one): block_m and
// block_n become the largest multiples of 16 not above them that divide block_q / block_k,
// and warps halve until each warp owns whole 16-row tiles.
Tiles fit_tiles_to_mask(const Spec& spec, Tiles tiles);

}  // namespace flashjit::gen
