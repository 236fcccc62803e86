// The bwd_dq_sm80 path: the backward's dQ kernel with mma.sync, ldmatrix and cp.async
// (templates/kernels/bwd_dq_sm80.cuh), deterministic, on every target.
#pragma once

#include "generator/kernel_path.h"
#include "templates/tile/budgets.cuh"

namespace flashjit::gen {

extern const KernelPathInfo kBwdDqSm80Path;

// dQ columns a CTA holds: at most 256 (128 floats a thread); wider qk heads split.
inline constexpr int kBwdDqMaxColumns = 256;
ColumnSplit bwd_dq_column_split(const PaddedDims& dims);

// Accumulator registers a thread holds, and the most before ptxas spills
// (templates/tile/budgets.cuh says how both were measured).
int bwd_dq_accumulator_registers(const ColumnSplit& split, const Tiles& tiles);
inline constexpr int kBwdDqMaxAccumulatorRegisters = fj::budget::kBwdDqSm80MaxAccumulatorRegisters;

int bwd_dq_shared_bytes(const PaddedDims& dims, const Tiles& tiles);
std::string bwd_dq_tiles_problem(const PaddedDims& dims, const Tiles& tiles,
                                 const std::string& target);

}  // namespace flashjit::gen
