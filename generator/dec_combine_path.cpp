#include "generator/dec_combine_path.h"

#include <fmt/format.h>

#include "generator/plan.h"

namespace flashjit::gen {
namespace {

// A warp a row; four rows a CTA keep enough partial rows in flight for a pass that reads
// each once.
Tiles default_tiles(const Spec&, const std::string&) { return {.block_m = 4, .warps = 4}; }

std::string tiles_problem(const PaddedDims&, const Tiles& t, const std::string&) {
  if (t.warps < 1 || t.block_m != t.warps)
    return fmt::format("block_m {} must equal warps {}: a warp a row", t.block_m, t.warps);
  return "";
}

ColumnSplit column_split(const PaddedDims& dims) {
  return {.dk_slice = dims.d_qk_pad, .dv_slice = dims.d_v_pad, .splits = 1};
}

int shared_bytes(const PaddedDims&, const Tiles&) { return 0; }

std::vector<Tiles> tuning_grid(const Spec&) { return {}; }

std::string rows_label(const Tiles& t) { return fmt::format("w{}", t.warps); }

std::string entry(const Plan& plan) {
  return struct_entry(plan, "DecParams", "fj::dec_combine");
}

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
    .default_tiles = default_tiles,
    .tiles_problem = tiles_problem,
    .tiles_in_mask_blocks = false,
    .column_split = column_split,
    .shared_bytes = shared_bytes,
    .tuning_grid = tuning_grid,
    .tuning_problem = no_tuning_problem,
    .tiles_label = rows_label,
    .extra_source = no_extra_source,
    .entry = entry,
};

}  // namespace flashjit::gen
