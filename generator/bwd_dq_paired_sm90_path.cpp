// bwd_dq_paired_sm90: the sm90 dQ kernel with 64 query rows a CTA and its two consumers paired
// on them (templates/kernels/bwd_dq_paired_sm90.cuh), where bwd_dq_sm90's 128 rows do not fit:
// a consumer's dQ beside S and dP past d320, or Q and dO of 128 rows beside a key tile. The
// sm80 dQ kernel served there before.
#include <fmt/format.h>

#include <vector>

#include "generator/bwd_dkdv_sm90_path.h"
#include "generator/bwd_dq_sm90_path.h"
#include "generator/bwd_sm90_source.h"
#include "generator/plan.h"
#include "templates/tile/budgets.cuh"

namespace flashjit::gen {
namespace {

constexpr int kRows = fj::budget::kBwdDqSm90PairedRows;

// Preferred first: the widest key tile, in two ring slots where they fit, else one. S's and
// dP's products read Q and dO whole for every key tile, so a wider tile reads them less often,
// and that paid more than having the next tile's copy run under this one's products: the tuner
// on the H200 at 16k tokens (bench/NOTES.md entry 37), d384 64 keys in one slot 22.7 ms, 32 in
// two 24.0; d512 32 keys in one slot 35.8 ms, 16 in two 41.2.
constexpr Tiles kPreferred[] = {
    {kRows, 64, kBwdSm90Warps, 2}, {kRows, 64, kBwdSm90Warps, 1}, {kRows, 48, kBwdSm90Warps, 2},
    {kRows, 48, kBwdSm90Warps, 1}, {kRows, 32, kBwdSm90Warps, 2}, {kRows, 32, kBwdSm90Warps, 1},
    {kRows, 16, kBwdSm90Warps, 2},
};

std::string tiles_problem(const PaddedDims& dims, const Tiles& t, const std::string& target) {
  if (t.block_m != kRows || t.warps != kBwdSm90Warps)
    return fmt::format("the paired dQ kernel runs block_m {} with {} warps (a producer and two "
                       "consumer warp groups on the same rows), not block_m {} with {}",
                       kRows, kBwdSm90Warps, t.block_m, t.warps);
  if (std::string problem = bwd_dq_sm90_key_tiles_problem(t); !problem.empty()) return problem;
  const int cols0 = fj::budget::bwd_dkdv_sm90_dq_cols0(dims.d_qk_pad);
  const int cols1 = dims.d_qk_pad - cols0;
  if (cols0 % 64 != 0 || cols0 > 256 || cols1 > 256)
    return fmt::format("head dim {} (padded): the paired consumers' dQ shares {} and {} must "
                       "each be a wgmma N of at most 256, the second starting on a 64-column "
                       "panel of K", dims.d_qk_pad, cols0, cols1);
  const int registers = fj::budget::bwd_dq_sm90_paired_registers(dims.d_qk_pad, t.block_n);
  if (registers > fj::budget::kBwdDqSm90MaxAccumulatorRegisters)
    return fmt::format("{} accumulator registers a paired consumer thread (more than {} spills)",
                       registers, fj::budget::kBwdDqSm90MaxAccumulatorRegisters);
  return shared_memory_problem(bwd_dq_sm90_shared_bytes(dims, t), target);
}

// The calls every sm90 dK/dV variant serves, at dims some tiles hold (the registry tries
// bwd_dq_sm90 first).
bool serves(const Spec& spec, const std::string& target, const CallTraits& call) {
  return bwd_dkdv_sm90_serves_calls(spec, target, call) &&
         some_tiles_fit(kPreferred, padded_dims(spec), target, tiles_problem);
}

Tiles default_tiles(const Spec& spec, const std::string& target, const CallTraits&) {
  return first_fitting_tiles(kPreferred, spec, target, tiles_problem, "sm90 paired dQ");
}

std::vector<Tiles> tuning_grid(const Spec&) {
  return {std::begin(kPreferred), std::end(kPreferred)};
}

// S's (or dP's) width and the two dQ shares.
std::string extra_source(const Plan& plan) {
  const int cols0 = fj::budget::bwd_dkdv_sm90_dq_cols0(plan.dk_slice);
  return bwd_sm90_wgmma_source(plan, {plan.tiles.block_n, cols0, plan.dk_slice - cols0});
}

std::string entry(const Plan& plan) { return bwd_sm90_entry(plan, "fj::bwd_dq_sm90"); }

}  // namespace

const KernelPathInfo kBwdDqPairedSm90Path = {
    .id = KernelPath::BwdDqPairedSm90,
    .name = "bwd_dq_paired_sm90",
    .label = "sm90",
    .kernel_prefix = "fa_bwd_dq_paired",
    .step = Step::BwdDq,
    .template_file = "kernels/bwd_dq_sm90.cuh",
    .layout = "fj::Sm90BwdDqLayout",
    .persistent_grid = false,
    .tma_loads = true,
    .grid_over = GridOver::QueryRows,
    .serves = serves,
    .default_tiles = default_tiles,
    .tiles_problem = tiles_problem,
    .tiles_in_mask_blocks = false,
    .column_split = whole_columns,
    .shared_bytes = bwd_dq_sm90_shared_bytes,
    .tuning_grid = tuning_grid,
    .tuning_problem = no_tuning_problem,
    .tiles_label = bwd_dq_sm90_tiles_label,
    .extra_source = extra_source,
    .entry = entry,
};

}  // namespace flashjit::gen
