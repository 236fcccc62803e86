#include "generator/bwd_dkdv_sm80_path.h"

#include <fmt/format.h>

#include "generator/plan.h"

namespace flashjit::gen {
namespace {

// Preferred first. Eight warps (128 keys a CTA) and 64 query rows a step are
// FlashAttention-2's d128 backward tile; smaller ones follow for wide heads, the 99 KB of
// sm_86/sm_89, and mask blocks of 16 or 32 keys.
constexpr Tiles kPreferred[] = {
    {64, 128, 8, 2}, {64, 128, 8, 1}, {64, 64, 4, 2}, {32, 128, 8, 2}, {32, 64, 4, 2},
    {64, 64, 4, 1},  {32, 64, 4, 1},  {64, 32, 2, 2}, {32, 32, 2, 2},  {32, 32, 2, 1},
    {16, 32, 2, 1},  {64, 16, 1, 2},  {32, 16, 1, 2}, {16, 16, 1, 1},
};

Tiles default_tiles(const Spec& spec, const std::string& target, const CallTraits&) {
  return first_fitting_tiles(kPreferred, spec, target, bwd_dkdv_tiles_problem, "dK/dV");
}

std::vector<Tiles> tuning_grid(const Spec&) {
  return {std::begin(kPreferred), std::end(kPreferred)};
}

std::string entry(const Plan& plan) {
  return struct_entry(plan, "BwdParams", "fj::bwd_dkdv_sm80");
}

}  // namespace

// The fewest splits whose slices, each rounded up to 16 columns, fit kBwdDkDvMaxColumns
// together (256/512 in three splits would be 96 + 176: ptxas spilled it at 32 rows a step).
ColumnSplit bwd_dkdv_column_split(const PaddedDims& dims) {
  for (int splits = ceil_div(dims.d_qk_pad + dims.d_v_pad, kBwdDkDvMaxColumns);; ++splits) {
    const ColumnSplit split{.dk_slice = round_up(ceil_div(dims.d_qk_pad, splits), 16),
                            .dv_slice = round_up(ceil_div(dims.d_v_pad, splits), 16),
                            .splits = splits};
    if (split.dk_slice + split.dv_slice <= kBwdDkDvMaxColumns) return split;
  }
}

int bwd_dkdv_accumulator_registers(const ColumnSplit& split, const Tiles& tiles) {
  return fj::budget::bwd_dkdv_sm80_accumulator_registers(split.dk_slice, split.dv_slice,
                                                         tiles.block_m);
}

int bwd_dkdv_shared_bytes(const PaddedDims& dims, const Tiles& t) {
  return fj::budget::bwd_dkdv_sm80_shared_bytes(dims.element_bytes, dims.d_qk_pad, dims.d_v_pad,
                                                t.block_m, t.block_n, t.stages);
}

std::string bwd_dkdv_tiles_problem(const PaddedDims& dims, const Tiles& t,
                                   const std::string& target) {
  if (t.warps < 1 || t.block_n != 16 * t.warps)
    return fmt::format("block_n {} must be 16 * warps ({}): a warp owns 16 keys", t.block_n,
                       16 * t.warps);
  if (t.block_m < 16 || t.block_m % 16 != 0)
    return fmt::format("block_m {} must be a positive multiple of 16", t.block_m);
  if (t.stages != 1 && t.stages != 2)
    return fmt::format("stages {}: the dK/dV kernel buffers one or two query tiles", t.stages);
  const int registers = bwd_dkdv_accumulator_registers(bwd_dkdv_column_split(dims), t);
  if (registers > kBwdDkDvMaxAccumulatorRegisters)
    return fmt::format("{} accumulator registers a thread (more than {} spills)", registers,
                       kBwdDkDvMaxAccumulatorRegisters);
  return shared_memory_problem(bwd_dkdv_shared_bytes(dims, t), target);
}

const KernelPathInfo kBwdDkDvSm80Path = {
    .id = KernelPath::BwdDkDvSm80,
    .name = "bwd_dkdv_sm80",
    .label = "sm80",
    .kernel_prefix = "fa_bwd_dkdv",
    .step = Step::BwdDkDv,
    .template_file = "kernels/bwd_dkdv_sm80.cuh",
    .layout = "fj::Sm80BwdDkDvLayout",
    .persistent_grid = false,
    .tma_loads = false,
    .grid_over = GridOver::KeyRows,
    .serves = serves_every_target,
    .default_tiles = default_tiles,
    .tiles_problem = bwd_dkdv_tiles_problem,
    .tiles_in_mask_blocks = true,
    .column_split = bwd_dkdv_column_split,
    .shared_bytes = bwd_dkdv_shared_bytes,
    .tuning_grid = tuning_grid,
    .tuning_problem = no_tuning_problem,
    .tiles_label = gen::tiles_label,
    .extra_source = no_extra_source,
    .entry = entry,
};

}  // namespace flashjit::gen
