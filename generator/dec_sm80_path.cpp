#include "generator/dec_sm80_path.h"

#include <fmt/format.h>

#include <algorithm>

#include "generator/plan.h"
#include "generator/targets.h"
#include "templates/tile/budgets.cuh"

namespace flashjit::gen {
namespace {

constexpr int kMaxBlockM = 64;

bool serves(const Spec& spec, const std::string& target, const CallTraits& call) {
  return is_known_target(target) && decode_serves_mask(spec) && !call.varlen;
}

int accumulator_registers(const PaddedDims& dims, const Tiles& t) {
  return fj::budget::dec_sm80_accumulator_registers(dims.d_qk_pad, dims.dv_slice, t.block_m,
                                                    t.block_n, t.warps);
}

int shared_bytes(const PaddedDims& dims, const Tiles& t) {
  return fj::budget::dec_sm80_shared_bytes(dims.element_bytes, dims.d_qk_pad, dims.dv_slice,
                                           t.block_m, t.block_n, t.warps, t.stages);
}

Tiles default_tiles(const Spec& spec, const std::string& target, const CallTraits&) {
  return dec_sm80_tiles(spec, target, 1);
}

std::string entry(const Plan& plan) {
  return struct_entry(plan, "DecParams", "fj::dec_sm80", full_register_ctas(plan));
}

}  // namespace

bool decode_serves_mask(const Spec& spec) {
  return spec.mask != MaskKind::BlockSparse && spec.mask != MaskKind::Pattern;
}

std::string dec_sm80_tiles_problem(const PaddedDims& dims, const Tiles& t,
                                   const std::string& target) {
  if (t.block_m != 8 && (t.block_m < 16 || t.block_m > kMaxBlockM || t.block_m % 16 != 0))
    return fmt::format("block_m {} must be 8, 16, 32, 48 or 64 packed rows", t.block_m);
  if (t.warps < 1 || t.block_n % (16 * t.warps) != 0)
    return fmt::format("block_n {} must be a positive multiple of 16 * warps ({}): each warp "
                       "takes whole k16 steps of every key tile",
                       t.block_n, 16 * t.warps);
  if (t.block_n < 16)
    return fmt::format("block_n {} must be a positive multiple of 16", t.block_n);
  if (t.stages < 2) return fmt::format("stages {}: the pipeline needs at least 2", t.stages);
  const int registers = accumulator_registers(dims, t);
  if (registers > fj::budget::kDecSm80MaxAccumulatorRegisters)
    return fmt::format("{} accumulator registers a thread (more than {} spills)", registers,
                       static_cast<int>(fj::budget::kDecSm80MaxAccumulatorRegisters));
  return shared_memory_problem(shared_bytes(dims, t), target);
}

Tiles dec_sm80_tiles(const Spec& spec, const std::string& target, int packed_rows) {
  const PaddedDims dims = padded_dims(spec);
  // Heads of 17 to 64 columns first try 128 keys a step with eight warps of 16 and two
  // stages (two CTAs a multiprocessor on sm_90a): a 64-key step's 16 KB left the step's fixed
  // costs (the barrier, the row reductions) a large share, and on the H200 the wider step ran
  // GQA-8 batch 128 and paged caches 10-15% faster (bench/NOTES.md entry 28). Heads of up to
  // 16 skip it: ptxas spilled 4 bytes at 32 and 64 rows, causal and window, on sm_90a.
  // Then four warps of 16 keys each read a 64-key tile per step; three stages keep two tiles
  // in flight while one is computed, and leave room for two CTAs a multiprocessor at d128.
  // Narrower tiles and fewer stages fit wide heads and the 99 KB of sm_86/sm_89.
  constexpr Tiles kNarrowKeyTile = {0, 128, 8, 2};
  constexpr Tiles kKeyTiles[] = {kNarrowKeyTile, {0, 64, 4, 3}, {0, 64, 4, 2}, {0, 32, 2, 3},
                                 {0, 32, 2, 2},  {0, 16, 1, 3}, {0, 16, 1, 2}};
  const bool narrow = std::min(dims.d_qk_pad, dims.dv_slice) > 16 &&
                      std::max(dims.d_qk_pad, dims.dv_slice) <= 64;
  // A mask's row bounds and comparisons need registers beside the accumulators. At the
  // budget's edge on sm_90a (255 registers), 48 rows of d66-80 causal (156 accumulators)
  // and 32 of d114-128 with a window (152) spilled, while 32 rows of d128 causal (152) did
  // not: a window counts 16, causal 8. (Counting 16 for causal too put 64 rows of d128
  // causal in 16-row blocks, 1.45x slower: bench/NOTES.md entry 26.)
  const int mask_registers = spec.mask == MaskKind::SlidingWindow ? 16 : spec.causal ? 8 : 0;
  // Calls of up to 8 packed rows (one new row of a GQA group of up to 8) take the 8-row tile,
  // whose products run transposed instead of padding an m16 tile; larger ones try it last.
  const int rows = packed_rows <= 8 ? 8 : std::min(round_up(packed_rows, 16), kMaxBlockM);
  for (int block_m = rows; block_m >= 8; block_m -= block_m == 16 ? 8 : 16) {
    for (Tiles t : kKeyTiles) {
      if (t == kNarrowKeyTile && !narrow) continue;
      t.block_m = block_m;
      if (dec_sm80_tiles_problem(dims, t, target).empty() &&
          accumulator_registers(dims, t) + mask_registers <=
              fj::budget::kDecSm80MaxAccumulatorRegisters)
        return t;
    }
  }
  throw Error(ErrorKind::Usage, fmt::format("no decode tile configuration fits head dims {}/{} on {}",
                                            spec.head_dim_qk, spec.head_dim_v, target));
}

const KernelPathInfo kDecSm80Path = {
    .id = KernelPath::DecSm80,
    .name = "dec_sm80",
    .label = "dec",
    .kernel_prefix = "fa_dec",
    .step = Step::DecSplit,
    .template_file = "kernels/dec_sm80.cuh",
    .layout = "fj::DecSm80Layout",
    .persistent_grid = false,
    .tma_loads = false,
    .grid_over = GridOver::PackedRows,
    .serves = serves,
    .default_tiles = default_tiles,
    .tiles_problem = dec_sm80_tiles_problem,
    .tiles_in_mask_blocks = false,
    .column_split = forward_column_split,
    .shared_bytes = shared_bytes,
    .tuning_grid = no_tuning_grid,
    .tuning_problem = no_tuning_problem,
    .tiles_label = tiles_label,
    .extra_source = no_extra_source,
    .entry = entry,
};

}  // namespace flashjit::gen
