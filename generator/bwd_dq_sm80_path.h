// The bwd_dq_sm80 path: the backward's dQ kernel with mma.sync, ldmatrix and cp.async
// (templates/kernels/bwd_dq_sm80.cuh), deterministic, on every target.
#pragma once

#include "generator/kernel_path.h"

namespace flashjit::gen {

extern const KernelPathInfo kBwdDqSm80Path;

// dQ columns a CTA holds: at most 256 (128 floats a thread); wider qk heads split.
inline constexpr int kBwdDqMaxColumns = 256;
ColumnSplit bwd_dq_column_split(const PaddedDims& dims);

// Accumulator registers a thread holds: block_n / 2 floats each of S and dP, and half its
// dQ columns.
int bwd_dq_accumulator_registers(const ColumnSplit& split, const Tiles& tiles);
// Above this ptxas spills or sits at the edge: with NVRTC 13.0 for sm_90a, 192 (d256 m64 n64
// w4) takes all 255 registers before any mask adds its own.
inline constexpr int kBwdDqMaxAccumulatorRegisters = 176;

int bwd_dq_shared_bytes(const PaddedDims& dims, const Tiles& tiles);
std::string bwd_dq_tiles_problem(const PaddedDims& dims, const Tiles& tiles,
                                 const std::string& target);

}  // namespace flashjit::gen
