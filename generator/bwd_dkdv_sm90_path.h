// The bwd_dkdv_sm90 paths: the backward's dK/dV kernel for sm_90a, warp-specialised with TMA,
// an mbarrier ring and wgmma (templates/kernels/bwd_dkdv_sm90.cuh), for calls TMA can load
// without a block mask; the others take bwd_dkdv_sm80. Three variants of the kernel:
//   bwd_dkdv_dq_sm90          also accumulates dQ (fp32 reductions in global memory, in
//                             whatever order they come, so not deterministic); bwd_dq_convert
//                             then writes dQ. Preferred. Where the dK/dV-only kernel would
//                             split the columns, 64 keys a CTA with the consumers paired.
//   bwd_dkdv_dq_ordered_sm90  the same, its reductions in key-block order: deterministic.
//                             Preferred for deterministic specs.
//   bwd_dkdv_paired_sm90      dK and dV only, 64 keys a CTA with the consumers paired, where
//                             bwd_dkdv_sm90 would split the columns; bwd_dq_sm90 computes dQ.
//                             Deterministic (generator/bwd_dkdv_paired_sm90_path.cpp).
//   bwd_dkdv_sm90             dK and dV only, deterministic; bwd_dq_sm90 computes dQ.
#pragma once

#include <string>

#include "generator/kernel_path.h"
#include "templates/tile/budgets.cuh"

namespace flashjit::gen {

extern const KernelPathInfo kBwdDkDvDqSm90Path;
extern const KernelPathInfo kBwdDkDvDqOrderedSm90Path;
extern const KernelPathInfo kBwdDkDvPairedSm90Path;
extern const KernelPathInfo kBwdDkDvSm90Path;

// 128 keys a CTA (two consumer warp groups of 64) and 12 warps (a producer warp group and
// two consumers, as the dQ kernel), always.
inline constexpr int kBwdSm90BlockN = 128;
inline constexpr int kBwdSm90Warps = 12;

// The dK/dV-only variant's columns a CTA holds: all of dK and dV while a consumer's
// registers hold them beside S^T and dP^T of a 32-row query tile; wider heads split into
// 64-column panels of at most 256 columns of both together. (The dQ variants hold whole
// columns, pairing their consumers where one cannot; bwd_dq_convert reads dq_accum so.)
ColumnSplit bwd_dkdv_sm90_column_split(const PaddedDims& dims);
// The calls every variant serves: sm_90a, hopper.warp_specialization, tensors TMA can load,
// no block mask (its transposed walk is the sm80 kernel's).
bool bwd_dkdv_sm90_serves_calls(const Spec& spec, const std::string& target,
                                const CallTraits& call);
// Why paired consumers (64 keys a CTA) cannot run `tiles` at these dims and this column
// split, shared memory apart ("" when they can): each holds its slice of dK or of dV.
std::string bwd_dkdv_sm90_paired_problem(const PaddedDims& dims, const ColumnSplit& split,
                                         const Tiles& tiles, bool accumulates_dq);
// The paired dK/dV-only kernel's columns a CTA holds: all of dK and dV while a consumer's
// registers hold its whole one beside S^T (or dP^T) and P^T packed at 32 query rows a step;
// past that the fewest splits into 64-column slices that fit, each CTA recomputing S^T and
// dP^T over the whole head dims as bwd_dkdv_sm90's splits do. (The dQ variants' paired
// consumers hold whole columns.)
ColumnSplit bwd_dkdv_paired_sm90_column_split(const PaddedDims& dims);
// The kernels' name part, "ws_m64n128s2", and the wgmma shapes the dK/dV-only kernels run.
std::string bwd_dkdv_sm90_tiles_label(const Tiles& tiles);
std::string bwd_dkdv_sm90_extra_source(const Plan& plan);
std::string bwd_dkdv_sm90_tiles_problem(const PaddedDims& dims, const Tiles& tiles,
                                        const std::string& target);

}  // namespace flashjit::gen
