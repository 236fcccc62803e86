#include "generator/dec_combine_path.h"

#include <fmt/format.h>

#include "generator/plan.h"

namespace flashjit::gen {
namespace {

// A CTA a row, its warps sharing the row's splits (kernels/dec_combine.cuh says why).
Tiles cta_a_row_tiles(const Spec&, const std::string&, const CallTraits&) {
  return {.block_m = 1, .warps = 4};
}

std::string cta_a_row_problem(const PaddedDims&, const Tiles& t, const std::string&) {
  if (t.block_m != 1 || t.warps < 1 || t.warps > 32)
    return fmt::format("block_m {} must be 1 (a CTA a row) and warps {} 1 to 32", t.block_m,
                       t.warps);
  return "";
}

std::string entry(const Plan& plan) { return struct_entry(plan, "DecParams", "fj::dec_combine"); }

}  // namespace

const KernelPathInfo kDecCombinePath = {
    .id = KernelPath::DecCombine,
    .name = "dec_combine",
    .label = "combine",
    .kernel_prefix = "fa_dec_combine",
    .step = Step::DecCombine,
    .template_file = "kernels/dec_combine.cuh",
    .layout = "fj::DecCombineLayout",
    .persistent_grid = false,
    .tma_loads = false,
    .grid_over = GridOver::CombineRows,
    .serves = serves_every_target,
    .default_tiles = cta_a_row_tiles,
    .tiles_problem = cta_a_row_problem,
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
