#include "generator/bwd_dq_convert_path.h"

#include "generator/bwd_dkdv_sm90_path.h"
#include "generator/plan.h"

namespace flashjit::gen {
namespace {

// The dQ step of the calls whose dK/dV step accumulates dQ: the two choices agree by
// construction.
bool serves(const Spec& spec, const std::string& target, const CallTraits& call) {
  return kBwdDkDvDqSm90Path.serves(spec, target, call) ||
         kBwdDkDvDqOrderedSm90Path.serves(spec, target, call);
}

std::string entry(const Plan& plan) { return struct_entry(plan, "BwdParams", "fj::bwd_dq_convert"); }

}  // namespace

const KernelPathInfo kBwdDqConvertPath = {
    .id = KernelPath::BwdDqConvert,
    .name = "bwd_dq_convert",
    .label = "convert",
    .kernel_prefix = "fa_bwd_dq_convert",
    .step = Step::BwdDq,
    .template_file = "kernels/bwd_dq_convert.cuh",
    .layout = "fj::BwdDqConvertLayout",
    .persistent_grid = false,
    .tma_loads = false,
    .grid_over = GridOver::QueryRows,
    .serves = serves,
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
