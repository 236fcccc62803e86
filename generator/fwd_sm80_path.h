// The fwd_sm80 path: the FlashAttention-2 forward with mma.sync, ldmatrix and cp.async
// (templates/kernels/fwd_sm80.cuh), which runs on every target.
#pragma once

#include <string>

#include "generator/kernel_path.h"
#include "templates/tile/budgets.cuh"

namespace flashjit::gen {

extern const KernelPathInfo kFwdSm80Path;

// Bytes of dynamic shared memory the sm80 kernel needs (templates/tile/budgets.cuh, which
// Sm80FwdLayout reads too; the emitted source static_asserts that both agree).
int sm80_shared_bytes(const PaddedDims& dims, const Tiles& tiles);
// Why `tiles` cannot run the sm80 kernel on `target` ("" when they can).
std::string sm80_tiles_problem(const PaddedDims& dims, const Tiles& tiles,
                               const std::string& target);
Tiles sm80_default_tiles(const Spec& spec, const std::string& target,
                         const CallTraits& call = {});

// Accumulator registers a thread holds for `tiles`, and the most before ptxas spills
// (templates/tile/budgets.cuh says how both were measured).
int sm80_accumulator_registers(int dv_slice, const Tiles& tiles);
inline constexpr int kSm80MaxAccumulatorRegisters = fj::budget::kFwdSm80MaxAccumulatorRegisters;
// Registers a thread keeps for the spec's mask through the main loop, counted against the
// same budget as the accumulators: a window's band edges, a block mask's walk over its key
// blocks. Measured (NVRTC 13.0, sm_80): d96 m128 n64 w4, 192 accumulator registers, compiles
// clean unmasked and causal, and spills 60 bytes with a window and 72 with block_sparse;
// d80, 176, compiles clean with every mask.
int sm80_mask_registers(const Spec& spec);
// Registers a thread needs for its tile copies beyond 16-byte rows', counted against the same
// budget: rows of 2 bytes (packed tensors of odd head dims) are copied an element at a time
// through registers (cp.async copies 4 bytes at least), four in flight. Measured (NVRTC 13.0,
// sm_80): d81-95 m128 n64 w4, 192 accumulator registers, causal, 2-byte rows spilled 56 bytes
// at 255 registers; 8- and 4-byte rows compiled clean.
int sm80_row_copy_registers(const CallTraits& call);

}  // namespace flashjit::gen
