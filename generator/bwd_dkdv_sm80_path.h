// The bwd_dkdv_sm80 path: the backward's dK/dV kernel with mma.sync, ldmatrix and cp.async
// (templates/kernels/bwd_dkdv_sm80.cuh), deterministic, on every target.
#pragma once

#include "generator/kernel_path.h"

namespace flashjit::gen {

extern const KernelPathInfo kBwdDkDvSm80Path;

// The columns a CTA holds: dK and dV of its 16 keys a warp, at most kBwdDkDvMaxColumns of
// both together (the rest of the registers hold S^T and dP^T); wider heads split.
inline constexpr int kBwdDkDvMaxColumns = 256;
ColumnSplit bwd_dkdv_column_split(const PaddedDims& dims);

// Accumulator registers a thread holds: block_m / 2 floats each of S^T and dP^T, and half
// its dK and dV columns.
int bwd_dkdv_accumulator_registers(const ColumnSplit& split, const Tiles& tiles);
// Above this ptxas spills or sits at the edge: with NVRTC 13.0 for sm_90a, 192 (d128 m64
// n128 w8) takes all 255 registers, and with wide heads the operand loads ptxas schedules
// ahead take about 90 more than the accumulators.
inline constexpr int kBwdDkDvMaxAccumulatorRegisters = 176;

int bwd_dkdv_shared_bytes(const PaddedDims& dims, const Tiles& tiles);
std::string bwd_dkdv_tiles_problem(const PaddedDims& dims, const Tiles& tiles,
                                   const std::string& target);

}  // namespace flashjit::gen
