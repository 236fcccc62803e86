// The fwd_sm90 path: the warp-specialised FlashAttention-3 style forward for sm_90a (TMA,
// mbarrier ring, wgmma, setmaxnreg; templates/kernels/fwd_sm90.cuh), for calls TMA can load.
#pragma once

#include <string>

#include "generator/kernel_path.h"
#include "templates/tile/budgets.cuh"

namespace flashjit::gen {

extern const KernelPathInfo kFwdSm90Path;

// The sm90 kernel: 128 query rows (two consumer warp groups of 64) and 12 warps, always.
inline constexpr int kSm90BlockM = 128;
inline constexpr int kSm90Warps = 12;
// Registers a consumer thread may give to O, S and P: 240 (setmaxnreg) minus what the
// descriptors, addresses, row statistics and loop state need.
inline constexpr int kSm90MaxAccumulatorRegisters = fj::budget::kFwdSm90MaxAccumulatorRegisters;

// Mirrors Sm90FwdLayout in templates/kernels/fwd_sm90.cuh; the emitted source static_asserts that
// both agree on the shared memory.
int sm90_shared_bytes(const PaddedDims& dims, const Tiles& tiles);
int sm90_consumer_registers(int dv_slice, const Tiles& tiles);
std::string sm90_tiles_problem(const PaddedDims& dims, const Tiles& tiles,
                               const std::string& target);
// The sm90 kernel's built-in tiles for `spec`; with a block mask, a block_n that divides
// its block_k.
Tiles sm90_default_tiles(const Spec& spec, const std::string& target,
                         const CallTraits& call = {});
// Can the sm90 kernel serve the mask of `spec`? Every mask; a block mask only when its query
// blocks hold whole 128-row CTAs (block_q a multiple of kSm90BlockM), as mask_tiles_problem
// requires. Its key blocks, a multiple of 16, always admit a block_n.
bool sm90_serves_mask(const Spec& spec);

}  // namespace flashjit::gen
