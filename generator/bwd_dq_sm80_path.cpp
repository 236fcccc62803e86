#include "generator/bwd_dq_sm80_path.h"

#include <fmt/format.h>

#include <span>

#include "generator/plan.h"

namespace flashjit::gen {
namespace {

// Preferred first: more rows a CTA read each K/V tile for more of them; narrower key tiles
// for wide heads and the 99 KB of sm_86/sm_89.
constexpr Tiles kPreferred[] = {
    {128, 64, 8, 2}, {64, 64, 4, 2}, {128, 32, 8, 2}, {64, 32, 4, 2}, {128, 16, 8, 2},
    {64, 16, 4, 2},  {32, 32, 2, 2}, {32, 16, 2, 2},  {16, 16, 1, 2},
};

// The heuristic's rules: the path's, and one measured exception. ptxas (NVRTC 13.0, sm_80 and
// sm_86) spills 4 bytes at 80 registers for m128 n64 w8 when both head dims pad to 16;
// m64 n64 w4 compiles clean there.
std::string heuristic_problem(const PaddedDims& dims, const Tiles& t, const std::string& target) {
  if (dims.d_qk_pad <= 16 && dims.d_v_pad <= 16 && t.warps == 8)
    return "ptxas spills with eight warps where both head dims pad to 16";
  return bwd_dq_tiles_problem(dims, t, target);
}

// A second: with a mask, at head dims that pad to 48 or 64, ptxas gives m128 n64 w8 the 128
// registers two CTAs of 256 threads a multiprocessor allow (as shared memory does) and spills 4
// to 8 bytes there (NVRTC 13.0: causal, window and block-sparse masks, sm_80 and sm_90a); the
// next preferred, m64 n64 w4, compiles clean.
Tiles default_tiles(const Spec& spec, const std::string& target, const CallTraits&) {
  const int d_qk_pad = padded_dims(spec).d_qk_pad;
  const bool masked = spec.causal || spec.mask != MaskKind::None;
  const bool skip_first = masked && (d_qk_pad == 48 || d_qk_pad == 64);
  return first_fitting_tiles(std::span(kPreferred).subspan(skip_first ? 1 : 0), spec, target,
                             heuristic_problem, "dQ");
}

std::vector<Tiles> tuning_grid(const Spec&) {
  return {std::begin(kPreferred), std::end(kPreferred)};
}

std::string entry(const Plan& plan) {
  return struct_entry(plan, "BwdParams", "fj::bwd_dq_sm80");
}

}  // namespace

ColumnSplit bwd_dq_column_split(const PaddedDims& dims) {
  const int splits = ceil_div(dims.d_qk_pad, kBwdDqMaxColumns);
  return {.dk_slice = round_up(ceil_div(dims.d_qk_pad, splits), 16),
          .dv_slice = dims.d_v_pad,
          .splits = splits};
}

int bwd_dq_accumulator_registers(const ColumnSplit& split, const Tiles& tiles) {
  return fj::budget::bwd_dq_sm80_accumulator_registers(split.dk_slice, tiles.block_n);
}

int bwd_dq_shared_bytes(const PaddedDims& dims, const Tiles& t) {
  return fj::budget::bwd_dq_sm80_shared_bytes(dims.element_bytes, dims.d_qk_pad, dims.d_v_pad,
                                              t.block_m, t.block_n, t.stages);
}

std::string bwd_dq_tiles_problem(const PaddedDims& dims, const Tiles& t,
                                 const std::string& target) {
  if (t.warps < 1 || t.block_m != 16 * t.warps)
    return fmt::format("block_m {} must be 16 * warps ({}): a warp owns 16 rows", t.block_m,
                       16 * t.warps);
  if (t.block_n < 16 || t.block_n % 16 != 0)
    return fmt::format("block_n {} must be a positive multiple of 16", t.block_n);
  if (t.stages < 2) return fmt::format("stages {}: the dQ pipeline needs at least 2", t.stages);
  const int registers = bwd_dq_accumulator_registers(bwd_dq_column_split(dims), t);
  if (registers > kBwdDqMaxAccumulatorRegisters)
    return fmt::format("{} accumulator registers a thread (more than {} spills)", registers,
                       kBwdDqMaxAccumulatorRegisters);
  return shared_memory_problem(bwd_dq_shared_bytes(dims, t), target);
}

const KernelPathInfo kBwdDqSm80Path = {
    .id = KernelPath::BwdDqSm80,
    .name = "bwd_dq_sm80",
    .label = "sm80",
    .kernel_prefix = "fa_bwd_dq",
    .step = Step::BwdDq,
    .template_file = "kernels/bwd_dq_sm80.cuh",
    .layout = "fj::Sm80BwdDqLayout",
    .persistent_grid = false,
    .tma_loads = false,
    .grid_over = GridOver::QueryRows,
    .serves = serves_every_target,
    .default_tiles = default_tiles,
    .tiles_problem = bwd_dq_tiles_problem,
    .tiles_in_mask_blocks = true,
    .column_split = bwd_dq_column_split,
    .shared_bytes = bwd_dq_shared_bytes,
    .tuning_grid = tuning_grid,
    .tuning_problem = no_tuning_problem,
    .tiles_label = gen::tiles_label,
    .extra_source = no_extra_source,
    .entry = entry,
};

}  // namespace flashjit::gen
