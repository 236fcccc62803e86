#include "generator/bwd_pre_path.h"

#include <fmt/format.h>

#include "generator/plan.h"

namespace flashjit::gen {
namespace {

// A warp a row at a time; four warps of 16 rows each keep enough loads in flight for a pass
// that reads O and dO once.
Tiles default_tiles(const Spec&, const std::string&, const CallTraits&) {
  return {.block_m = 64, .warps = 4};
}

std::string tiles_problem(const PaddedDims&, const Tiles& t, const std::string&) {
  if (t.warps < 1 || t.block_m < 1 || t.block_m % t.warps != 0)
    return fmt::format("block_m {} must be a positive multiple of warps {}", t.block_m, t.warps);
  return "";
}

std::string rows_label(const Tiles& t) { return fmt::format("m{}w{}", t.block_m, t.warps); }

std::string entry(const Plan& plan) {
  return struct_entry(plan, "BwdParams", "fj::bwd_pre");
}

}  // namespace

const KernelPathInfo kBwdPrePath = {
    .id = KernelPath::BwdPre,
    .name = "bwd_pre",
    .label = "pre",
    .kernel_prefix = "fa_bwd_pre",
    .step = Step::BwdPre,
    .template_file = "kernels/bwd_pre.cuh",
    .layout = "fj::BwdPreLayout",
    .persistent_grid = false,
    .tma_loads = false,
    .grid_over = GridOver::QueryRows,
    .serves = serves_every_target,
    .default_tiles = default_tiles,
    .tiles_problem = tiles_problem,
    .tiles_in_mask_blocks = false,
    .column_split = whole_columns,
    .shared_bytes = no_shared_memory,
    .tuning_grid = no_tuning_grid,
    .tuning_problem = no_tuning_problem,
    .tiles_label = rows_label,
    .extra_source = no_extra_source,
    .entry = entry,
};

}  // namespace flashjit::gen
