#include "generator/bwd_dkdv_sm90_path.h"

#include <fmt/format.h>

#include "generator/bwd_sm90_source.h"
#include "generator/plan.h"

namespace flashjit::gen {
namespace {

// Preferred first: 64 query rows a step (wgmma N = 64 for S^T and dP^T) and two ring slots;
// 32 rows where the dK and dV columns leave too few registers, one slot where shared memory
// is short.
constexpr Tiles kPreferred[] = {
    {64, kBwdSm90BlockN, kBwdSm90Warps, 2},
    {32, kBwdSm90BlockN, kBwdSm90Warps, 2},
    {64, kBwdSm90BlockN, kBwdSm90Warps, 1},
    {32, kBwdSm90BlockN, kBwdSm90Warps, 1},
};

int shared_bytes(const PaddedDims& dims, const Tiles& t) {
  const ColumnSplit split = bwd_dkdv_sm90_column_split(dims);
  return fj::budget::bwd_dkdv_sm90_shared_bytes(dims.element_bytes, dims.d_qk_pad, dims.d_v_pad,
                                                split.dk_slice, split.dv_slice, split.splits,
                                                t.block_m, t.block_n, t.stages);
}

bool some_tiles_fit(const PaddedDims& dims, const std::string& target) {
  for (const Tiles& t : kPreferred)
    if (bwd_dkdv_sm90_tiles_problem(dims, t, target).empty()) return true;
  return false;
}

// sm_90a, hopper.warp_specialization, tensors TMA can load, no block mask (its transposed walk
// is the sm80 kernel's), and dims some tiles hold.
bool serves(const Spec& spec, const std::string& target, const CallTraits& call) {
  return target == "sm_90a" && spec.warp_specialization && spec.arch != Arch::Sm80 &&
         call.tma_loadable && (spec.mask == MaskKind::None || spec.mask == MaskKind::SlidingWindow) &&
         some_tiles_fit(padded_dims(spec), target);
}

Tiles default_tiles(const Spec& spec, const std::string& target) {
  return first_fitting_tiles(kPreferred, spec, target, bwd_dkdv_sm90_tiles_problem,
                             "sm90 dK/dV");
}

std::vector<Tiles> tuning_grid(const Spec&) {
  return {std::begin(kPreferred), std::end(kPreferred)};
}

std::string ws_tiles_label(const Tiles& t) {
  return fmt::format("ws_m{}n{}s{}", t.block_m, t.block_n, t.stages);
}

std::string extra_source(const Plan& plan) {
  return bwd_sm90_wgmma_source(plan, {plan.tiles.block_m, plan.dk_slice, plan.dv_slice});
}

std::string entry(const Plan& plan) { return bwd_sm90_entry(plan, "fj::bwd_dkdv_sm90"); }

}  // namespace

ColumnSplit bwd_dkdv_sm90_column_split(const PaddedDims& dims) {
  const int whole = fj::budget::bwd_dkdv_sm90_consumer_registers(dims.d_qk_pad, dims.d_v_pad, 32);
  if (whole <= fj::budget::kBwdDkDvSm90MaxAccumulatorRegisters) return whole_columns(dims);
  const int splits = ceil_div(dims.d_qk_pad + dims.d_v_pad, 256);
  return {.dk_slice = round_up(ceil_div(dims.d_qk_pad, splits), 64),
          .dv_slice = round_up(ceil_div(dims.d_v_pad, splits), 64),
          .splits = splits};
}

std::string bwd_dkdv_sm90_tiles_problem(const PaddedDims& dims, const Tiles& t,
                                        const std::string& target) {
  if (t.block_n != kBwdSm90BlockN || t.warps != kBwdSm90Warps)
    return fmt::format("the warp-specialised dK/dV kernel runs block_n {} with {} warps (a "
                       "producer and two consumer warp groups), not block_n {} with {}",
                       kBwdSm90BlockN, kBwdSm90Warps, t.block_n, t.warps);
  if (t.block_m != 32 && t.block_m != 64)
    return fmt::format("block_m {} must be 32 or 64 (the wgmma N of S^T)", t.block_m);
  if (t.stages != 1 && t.stages != 2)
    return fmt::format("stages {}: the dK/dV kernel's ring has one or two slots", t.stages);
  if (dims.d_qk_pad > 256 || dims.d_v_pad > 256)
    return fmt::format("head dims {}/{} (padded): past 256 the sm80 kernel serves",
                       dims.d_qk_pad, dims.d_v_pad);
  const ColumnSplit split = bwd_dkdv_sm90_column_split(dims);
  if (split.dk_slice > 256 || split.dv_slice > 256)
    return fmt::format("dK/dV slices {}/{} exceed the wgmma N of 256", split.dk_slice,
                       split.dv_slice);
  const int registers =
      fj::budget::bwd_dkdv_sm90_consumer_registers(split.dk_slice, split.dv_slice, t.block_m);
  if (registers > fj::budget::kBwdDkDvSm90MaxAccumulatorRegisters)
    return fmt::format("{} accumulator registers a consumer thread (more than {} spills)",
                       registers, fj::budget::kBwdDkDvSm90MaxAccumulatorRegisters);
  return shared_memory_problem(shared_bytes(dims, t), target);
}

const KernelPathInfo kBwdDkDvSm90Path = {
    .id = KernelPath::BwdDkDvSm90,
    .name = "bwd_dkdv_sm90",
    .label = "sm90",
    .kernel_prefix = "fa_bwd_dkdv",
    .step = Step::BwdDkDv,
    .template_file = "kernels/bwd_dkdv_sm90.cuh",
    .layout = "fj::Sm90BwdDkDvLayout",
    .persistent_grid = false,
    .tma_loads = true,
    .grid_over = GridOver::KeyRows,
    .serves = serves,
    .default_tiles = default_tiles,
    .tiles_problem = bwd_dkdv_sm90_tiles_problem,
    .tiles_in_mask_blocks = false,
    .column_split = bwd_dkdv_sm90_column_split,
    .shared_bytes = shared_bytes,
    .tuning_grid = tuning_grid,
    .tuning_problem = no_tuning_problem,
    .tiles_label = ws_tiles_label,
    .extra_source = extra_source,
    .entry = entry,
};

}  // namespace flashjit::gen
