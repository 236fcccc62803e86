// The bwd_dkdv_sm80 path: the backward's dK/dV kernel with mma.sync, ldmatrix and cp.async
// (templates/kernels/bwd_dkdv_sm80.cuh), deterministic, on every target.
#pragma once

#include "generator/kernel_path.h"
#include "templates/tile/budgets.cuh"

namespace flashjit::gen {

extern const KernelPathInfo kBwdDkDvSm80Path;

// The columns a CTA holds: dK and dV of its 16 keys a warp, at most kBwdDkDvMaxColumns of
// both together (the rest of the registers hold S^T and dP^T); wider heads split.
inline constexpr int kBwdDkDvMaxColumns = 256;
ColumnSplit bwd_dkdv_column_split(const PaddedDims& dims);

// Accumulator registers a thread holds, and the most before ptxas spills
// (templates/tile/budgets.cuh says how both were measured).
int bwd_dkdv_accumulator_registers(const ColumnSplit& split, const Tiles& tiles);
inline constexpr int kBwdDkDvMaxAccumulatorRegisters =
    fj::budget::kBwdDkDvSm80MaxAccumulatorRegisters;

int bwd_dkdv_shared_bytes(const PaddedDims& dims, const Tiles& tiles);
std::string bwd_dkdv_tiles_problem(const PaddedDims& dims, const Tiles& tiles,
                                   const std::string& target);

}  // namespace flashjit::gen
