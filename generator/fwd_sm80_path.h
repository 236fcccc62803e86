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
Tiles sm80_default_tiles(const Spec& spec, const std::string& target);

// Accumulator registers a thread holds for `tiles`, and the most before ptxas spills
// (templates/tile/budgets.cuh says how both were measured).
int sm80_accumulator_registers(int dv_slice, const Tiles& tiles);
inline constexpr int kSm80MaxAccumulatorRegisters = fj::budget::kFwdSm80MaxAccumulatorRegisters;

}  // namespace flashjit::gen
