// The bwd_dq_sm90 path: the backward's dQ kernel for sm_90a, warp-specialised with TMA, an
// mbarrier ring of K and V tiles and wgmma (templates/kernels/bwd_dq_sm90.cuh), deterministic,
// for the calls bwd_dkdv_sm90 serves (TMA-loadable, no block mask).
#pragma once

#include <string>

#include "generator/kernel_path.h"

namespace flashjit::gen {

extern const KernelPathInfo kBwdDqSm90Path;
// 64 rows a CTA with the consumers paired, where 128 do not fit
// (generator/bwd_dq_paired_sm90_path.cpp).
extern const KernelPathInfo kBwdDqPairedSm90Path;

// 128 query rows a CTA (two consumer warp groups of 64) and 12 warps, always.
inline constexpr int kBwdDqSm90BlockM = 128;

std::string bwd_dq_sm90_tiles_problem(const PaddedDims& dims, const Tiles& tiles,
                                      const std::string& target);
// What both dQ paths share: shared memory (the exchange's too at 64 rows), the kernel names'
// tiles part ("ws_n32s2"), and the rules of the key tiles and the ring.
int bwd_dq_sm90_shared_bytes(const PaddedDims& dims, const Tiles& tiles);
std::string bwd_dq_sm90_tiles_label(const Tiles& tiles);
std::string bwd_dq_sm90_key_tiles_problem(const Tiles& tiles);

}  // namespace flashjit::gen
