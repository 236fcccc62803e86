#include "generator/bwd_dq_sm90_path.h"

#include <fmt/format.h>

#include "generator/bwd_dkdv_sm90_path.h"
#include "generator/bwd_sm90_source.h"
#include "generator/plan.h"
#include "templates/tile/budgets.cuh"

namespace flashjit::gen {
namespace {

// Preferred first: the widest key tile whose S, dP and dS fit beside dQ in a consumer's
// registers, with two ring slots; one slot only where two do not fit beside Q and dO (d320's
// 128 rows of Q and dO take 160 KB: 32 keys a step).
constexpr Tiles kPreferred[] = {
    {kBwdDqSm90BlockM, 128, kBwdSm90Warps, 2}, {kBwdDqSm90BlockM, 96, kBwdSm90Warps, 2},
    {kBwdDqSm90BlockM, 80, kBwdSm90Warps, 2},  {kBwdDqSm90BlockM, 64, kBwdSm90Warps, 2},
    {kBwdDqSm90BlockM, 48, kBwdSm90Warps, 2},  {kBwdDqSm90BlockM, 32, kBwdSm90Warps, 2},
    {kBwdDqSm90BlockM, 64, kBwdSm90Warps, 1},  {kBwdDqSm90BlockM, 32, kBwdSm90Warps, 1},
};

// The dK/dV path's calls: the backward's two sm90 kernels serve the same calls, and a spec
// takes both or neither.
bool serves(const Spec& spec, const std::string& target, const CallTraits& call) {
  return kBwdDkDvSm90Path.serves(spec, target, call) &&
         some_tiles_fit(kPreferred, padded_dims(spec), target, bwd_dq_sm90_tiles_problem);
}

Tiles default_tiles(const Spec& spec, const std::string& target, const CallTraits&) {
  return first_fitting_tiles(kPreferred, spec, target, bwd_dq_sm90_tiles_problem, "sm90 dQ");
}

std::vector<Tiles> tuning_grid(const Spec&) {
  return {std::begin(kPreferred), std::end(kPreferred)};
}

std::string extra_source(const Plan& plan) {
  return bwd_sm90_wgmma_source(plan, {plan.tiles.block_n, plan.dk_slice});
}

std::string entry(const Plan& plan) { return bwd_sm90_entry(plan, "fj::bwd_dq_sm90"); }

}  // namespace

int bwd_dq_sm90_shared_bytes(const PaddedDims& dims, const Tiles& t) {
  return fj::budget::bwd_dq_sm90_shared_bytes(dims.element_bytes, dims.d_qk_pad, dims.d_v_pad,
                                              t.block_m, t.block_n, t.stages);
}

std::string bwd_dq_sm90_tiles_label(const Tiles& t) {
  return fmt::format("ws_n{}s{}", t.block_n, t.stages);
}

std::string bwd_dq_sm90_key_tiles_problem(const Tiles& t) {
  if (t.block_n < 16 || t.block_n > 256 || t.block_n % 16 != 0)
    return fmt::format("block_n {} must be a multiple of 16 from 16 to 256 (the wgmma N of S)",
                       t.block_n);
  if (t.stages < 1 || t.stages > 2)
    return fmt::format("stages {}: the dQ kernel's ring has one or two slots", t.stages);
  return "";
}

std::string bwd_dq_sm90_tiles_problem(const PaddedDims& dims, const Tiles& t,
                                      const std::string& target) {
  if (t.block_m != kBwdDqSm90BlockM || t.warps != kBwdSm90Warps)
    return fmt::format("the warp-specialised dQ kernel runs block_m {} with {} warps (a "
                       "producer and two consumer warp groups), not block_m {} with {}",
                       kBwdDqSm90BlockM, kBwdSm90Warps, t.block_m, t.warps);
  if (std::string problem = bwd_dq_sm90_key_tiles_problem(t); !problem.empty()) return problem;
  const int registers = fj::budget::bwd_dq_sm90_consumer_registers(dims.d_qk_pad, t.block_n);
  if (registers > fj::budget::kBwdDqSm90MaxAccumulatorRegisters)
    return fmt::format("{} accumulator registers a consumer thread (more than {} spills)",
                       registers, fj::budget::kBwdDqSm90MaxAccumulatorRegisters);
  return shared_memory_problem(bwd_dq_sm90_shared_bytes(dims, t), target);
}

const KernelPathInfo kBwdDqSm90Path = {
    .id = KernelPath::BwdDqSm90,
    .name = "bwd_dq_sm90",
    .label = "sm90",
    .kernel_prefix = "fa_bwd_dq",
    .step = Step::BwdDq,
    .template_file = "kernels/bwd_dq_sm90.cuh",
    .layout = "fj::Sm90BwdDqLayout",
    .persistent_grid = false,
    .tma_loads = true,
    .grid_over = GridOver::QueryRows,
    .serves = serves,
    .default_tiles = default_tiles,
    .tiles_problem = bwd_dq_sm90_tiles_problem,
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
