// The fwd_sm80 path: the FlashAttention-2 forward with mma.sync, ldmatrix and cp.async
// (templates/kernels/fwd_sm80.cuh), which runs on every target.
#pragma once

#include <string>

#include "generator/kernel_path.h"

namespace flashjit::gen {

extern const KernelPathInfo kFwdSm80Path;

// Bytes of dynamic shared memory the sm80 kernel needs (mirrors Sm80FwdLayout in
// templates/kernels/fwd_sm80.cuh; the emitted source static_asserts that both agree).
int sm80_shared_bytes(const PaddedDims& dims, const Tiles& tiles);
// Why `tiles` cannot run the sm80 kernel on `target` ("" when they can).
std::string sm80_tiles_problem(const PaddedDims& dims, const Tiles& tiles,
                               const std::string& target);
Tiles sm80_default_tiles(const Spec& spec, const std::string& target);

// Accumulator registers a thread holds for `tiles`: each warp owns block_m / warps query rows
// in groups of 16 (one m16 MMA row block), and for each group a thread keeps dv_slice / 2
// floats of O, block_n / 2 floats of S and block_n / 4 registers of P packed to 16 bits.
int sm80_accumulator_registers(int dv_slice, const Tiles& tiles);
// Above this ptxas spills (of the 255 registers a thread, the addresses, loop counters, row
// statistics and operand fragments take the rest): measured with NVRTC 13.0 for sm_80, 192
// (d96 m128 n64 w4) compiles clean and 208 spills (d112 m128 n64 w4: 16 bytes);
// tests/cpu/test_kernel_paths.cpp compiles both sides of the edge.
inline constexpr int kSm80MaxAccumulatorRegisters = 200;

}  // namespace flashjit::gen
