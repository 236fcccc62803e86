#include "generator/fwd_sm80_path.h"

#include <fmt/format.h>

#include <algorithm>

#include "generator/plan.h"

namespace flashjit::gen {
namespace {

std::string tiles_problem(const PaddedDims& dims, const Tiles& tiles, const std::string& target) {
  return sm80_tiles_problem(dims, tiles, target);
}

std::vector<Tiles> tuning_grid(const Spec& spec) {
  const PaddedDims dims = padded_dims(spec);
  // Narrow key blocks only past d 192, where the heuristic itself uses them.
  std::vector<int> block_ns = {32, 64, 128};
  if (std::max(dims.d_qk_pad, dims.dv_slice) > 192) block_ns.insert(block_ns.begin(), 16);
  std::vector<Tiles> grid;
  for (int block_m : {64, 128})
    for (int block_n : block_ns)
      for (int warps : {4, 8})
        for (int stages : {2, 3}) grid.push_back(Tiles{block_m, block_n, warps, stages});
  return grid;
}

std::string tuning_problem(const PaddedDims& dims, const Tiles& tiles) {
  const int registers = sm80_accumulator_registers(dims.dv_slice, tiles);
  if (registers <= kSm80MaxAccumulatorRegisters) return "";
  return fmt::format("{} accumulator registers a thread (more than {} spills)", registers,
                     kSm80MaxAccumulatorRegisters);
}

std::string entry(const Plan& plan) {
  return struct_entry(plan, "FwdParams", "fj::fwd_sm80", full_register_ctas(plan));
}

}  // namespace

const KernelPathInfo kFwdSm80Path = {
    .id = KernelPath::FwdSm80,
    .name = "fwd_sm80",
    .label = "sm80",
    .kernel_prefix = "fa_fwd",
    .step = Step::Forward,
    .template_file = "kernels/fwd_sm80.cuh",
    .layout = "fj::Sm80FwdLayout",
    .persistent_grid = false,
    .tma_loads = false,
    .grid_over = GridOver::QueryRows,
    .serves = serves_every_target,
    .default_tiles = sm80_default_tiles,
    .tiles_problem = tiles_problem,
    .tiles_in_mask_blocks = true,
    .column_split = forward_column_split,
    .shared_bytes = sm80_shared_bytes,
    .tuning_grid = tuning_grid,
    .tuning_problem = tuning_problem,
    .tiles_label = gen::tiles_label,
    .extra_source = no_extra_source,
    .entry = entry,
};

int sm80_shared_bytes(const PaddedDims& dims, const Tiles& t) {
  return fj::budget::fwd_sm80_shared_bytes(dims.element_bytes, dims.d_qk_pad, dims.dv_slice,
                                           t.block_m, t.block_n, t.stages);
}

std::string sm80_tiles_problem(const PaddedDims& dims, const Tiles& t, const std::string& target) {
  if (t.warps == 12)
    return "12 warps is the sm90 kernel's shape (a producer and two consumer warp groups); the "
           "sm80 kernel runs 1, 2, 4, 8 or 16";
  if (t.warps < 1 || t.block_m % (16 * t.warps) != 0)
    return fmt::format("block_m {} must be a multiple of 16 * warps ({})", t.block_m,
                       16 * t.warps);
  if (t.block_n < 16 || t.block_n % 16 != 0)
    return fmt::format("block_n {} must be a positive multiple of 16", t.block_n);
  if (t.stages < 2) return fmt::format("stages {}: the sm80 pipeline needs at least 2", t.stages);
  return shared_memory_problem(sm80_shared_bytes(dims, t), target);
}

int sm80_accumulator_registers(int dv_slice, const Tiles& tiles) {
  return fj::budget::fwd_sm80_accumulator_registers(dv_slice, tiles.block_m, tiles.block_n,
                                                    tiles.warps);
}

int sm80_mask_registers(const Spec& spec) {
  constexpr int kMaskRegisters = 16;
  return spec.mask == MaskKind::None ? 0 : kMaskRegisters;
}

int sm80_row_copy_registers(const CallTraits& call) {
  constexpr int kElementCopyRegisters = 16;
  return call.align_bytes == 2 ? kElementCopyRegisters : 0;
}

Tiles sm80_default_tiles(const Spec& spec, const std::string& target, const CallTraits& call) {
  const PaddedDims dims = padded_dims(spec);
  const int d = std::max(dims.d_qk_pad, dims.dv_slice);
  // Preferred first: the best configuration without spills per head-dim range, measured
  // on an H200 (bench/tile_sweep.py, bf16, 16k tokens, seqlen 4096; bench/NOTES.md has the
  // table). Four warps with two m16 tiles each (block_m 128) load every K/V fragment once
  // for 32 rows, which halves shared-memory traffic per product against one tile a warp;
  // past d 96 the O accumulator leaves no room for that with block_n 64, and eight warps
  // of one tile each win. The fallbacks, in order, fit the 163 KB of sm_80 and the 99 KB
  // of sm_86/sm_89 (where m64 n64 w4 spills at d 128).
  const Tiles first = d <= 64    ? Tiles{128, 64, 4, 3}
                      : d <= 96  ? Tiles{128, 64, 4, 2}
                      : d <= 112 ? Tiles{128, 32, 4, 2}
                      : d <= 128 ? Tiles{128, 128, 8, 2}
                      : d <= 192 ? Tiles{128, 64, 8, 2}
                      : d <= 256 ? Tiles{64, 32, 4, 2}
                      : d <= 384 ? Tiles{128, 32, 8, 2}
                                 : Tiles{128, 16, 8, 2};
  const Tiles preferred[] = {
      first, {128, 64, 8, 2}, {64, 32, 4, 2}, {64, 64, 4, 2}, {64, 16, 4, 2}, {32, 32, 2, 2},
      {32, 16, 2, 2}, {16, 16, 1, 2},
  };
  // Past d 384 m64 n32 w4 takes every register (255 with a window at d500, 16-byte rows), and
  // rows of a narrow alignment (packed tensors of odd head dims), whose several copies a row
  // need registers for their addresses, spill it (8 bytes at d500 and d511 with a window or
  // block mask, 8- and 2-byte rows, NVRTC 13.0 sm_80); their 16-key tiles compile clean.
  const bool narrow_wide = call.align_bytes < 16 && d > 384;
  // A tiling whose accumulators and mask state overrun the register budget spills.
  for (const Tiles& candidate : preferred) {
    if (narrow_wide && candidate.block_m == 64 && candidate.block_n > 16) continue;
    const Tiles t = fit_tiles_to_mask(spec, candidate);
    if (sm80_tiles_problem(dims, t, target).empty() &&
        sm80_accumulator_registers(dims.dv_slice, t) + sm80_mask_registers(spec) +
                sm80_row_copy_registers(call) <=
            kSm80MaxAccumulatorRegisters)
      return t;
  }
  throw Error(ErrorKind::Usage,
              fmt::format("no sm80 tile configuration fits head dims {}/{} on {}",
                          spec.head_dim_qk, spec.head_dim_v, target));
}

}  // namespace flashjit::gen
