#include "generator/bwd_dq_convert_path.h"

#include <fmt/format.h>

#include "generator/plan.h"

namespace flashjit::gen {
namespace {

// The dK/dV kernel adds dQ up in fp32 when the backward need not be deterministic.
bool serves(const Spec& spec, const std::string& target, const CallTraits&) {
  return !spec.deterministic && is_known_target(target);
}

ColumnSplit column_split(const PaddedDims& dims) {
  return {.dk_slice = dims.d_qk_pad, .dv_slice = dims.d_v_pad, .splits = 1};
}

// A warp a row at a time, as bwd_pre.
Tiles default_tiles(const Spec&, const std::string&) { return {.block_m = 64, .warps = 4}; }

std::string tiles_problem(const PaddedDims&, const Tiles& t, const std::string&) {
  if (t.warps < 1 || t.block_m < 1 || t.block_m % t.warps != 0)
    return fmt::format("block_m {} must be a positive multiple of warps {}", t.block_m, t.warps);
  return "";
}

int shared_bytes(const PaddedDims&, const Tiles&) { return 0; }

std::vector<Tiles> tuning_grid(const Spec&) { return {}; }

std::string tuning_problem(const PaddedDims&, const Tiles&) { return ""; }

std::string rows_label(const Tiles& t) { return fmt::format("m{}w{}", t.block_m, t.warps); }

std::string extra_source(const Plan&) { return ""; }

std::string entry(const Plan& plan) {
  return fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}) {}(const BwdParams params) {{\n"
      "  fj::bwd_dq_convert<KernelConfig>(params);\n"
      "}}\n",
      plan.threads, plan.kernel_name);
}

}  // namespace

const KernelPathInfo kBwdDqConvertPath = {
    .id = KernelPath::BwdDqConvert,
    .name = "bwd_dq_convert",
    .label = "convert",
    .kernel_prefix = "fa_bwd_dqcvt",
    .step = Step::BwdDq,
    .template_file = "kernels/bwd_dq_convert.cuh",
    .layout = "fj::BwdDqConvertLayout",
    .persistent_grid = false,
    .tma_loads = false,
    .grid_over = GridOver::QueryRows,
    .serves = serves,
    .default_tiles = default_tiles,
    .tiles_problem = tiles_problem,
    .tiles_in_mask_blocks = false,
    .column_split = column_split,
    .shared_bytes = shared_bytes,
    .tuning_grid = tuning_grid,
    .tuning_problem = tuning_problem,
    .tiles_label = rows_label,
    .extra_source = extra_source,
    .entry = entry,
};

}  // namespace flashjit::gen
