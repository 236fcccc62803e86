// The bwd_dq_sm90 path: the backward's dQ kernel for sm_90a, warp-specialised with TMA, an
// mbarrier ring of K and V tiles and wgmma (templates/kernels/bwd_dq_sm90.cuh), deterministic,
// for the calls bwd_dkdv_sm90 serves (TMA-loadable, no block mask, head dims up to 256).
#pragma once

#include <string>

#include "generator/kernel_path.h"

namespace flashjit::gen {

extern const KernelPathInfo kBwdDqSm90Path;

// 128 query rows a CTA (two consumer warp groups of 64) and 12 warps, always.
inline constexpr int kBwdDqSm90BlockM = 128;

std::string bwd_dq_sm90_tiles_problem(const PaddedDims& dims, const Tiles& tiles,
                                      const std::string& target);

}  // namespace flashjit::gen
