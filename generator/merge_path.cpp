#include "generator/merge_path.h"

#include "generator/plan.h"

namespace flashjit::gen {
namespace {

std::string entry(const Plan& plan) {
  return struct_entry(plan, "MergeParams", "fj::merge_partials");
}

}  // namespace

const KernelPathInfo kMergePath = {
    .id = KernelPath::Merge,
    .name = "merge",
    .label = "merge",
    .kernel_prefix = "fa_merge",
    .step = Step::Merge,
    .template_file = "kernels/merge.cuh",
    .layout = "fj::MergeLayout",
    .persistent_grid = false,
    .tma_loads = false,
    .grid_over = GridOver::CombineRows,
    .serves = serves_every_target,
    .default_tiles = warp_a_row_tiles,
    .tiles_problem = warp_a_row_problem,
    .tiles_in_mask_blocks = false,
    .column_split = whole_columns,
    .shared_bytes = no_shared_memory,
    .tuning_grid = no_tuning_grid,
    .tuning_problem = no_tuning_problem,
    .tiles_label = warps_label,
    .extra_source = no_extra_source,
    .entry = entry,
};

}  // namespace flashjit::gen
