#include "generator/bwd_dkdv_sm90_path.h"

#include <fmt/format.h>

#include <vector>

#include "generator/bwd_sm90_source.h"
#include "generator/plan.h"
#include "generator/targets.h"

namespace flashjit::gen {
namespace {

// What a variant does with dQ (templates' DqAdds): its shared memory differs.
enum class DqAdds { None, AnyOrder, KeyOrder };

// Preferred first: the most query rows a step the consumers' registers hold beside dK and dV
// (S^T's and dP^T's wgmma N: wider is fewer steps and less shared-memory traffic per product;
// 112 rows fit at d64 but leave ptxas too few registers and ran slower than 96), two ring
// slots; one slot where shared memory is short. (Past what 32 rows leave room for, the
// paired kernel serves.)
constexpr Tiles kPreferred[] = {
    {128, kBwdSm90BlockN, kBwdSm90Warps, 2},
    {96, kBwdSm90BlockN, kBwdSm90Warps, 2}, {80, kBwdSm90BlockN, kBwdSm90Warps, 2},
    {64, kBwdSm90BlockN, kBwdSm90Warps, 2}, {48, kBwdSm90BlockN, kBwdSm90Warps, 2},
    {32, kBwdSm90BlockN, kBwdSm90Warps, 2}, {64, kBwdSm90BlockN, kBwdSm90Warps, 1},
    {48, kBwdSm90BlockN, kBwdSm90Warps, 1}, {32, kBwdSm90BlockN, kBwdSm90Warps, 1},
};
// The dQ variant's: 128 queries a step where the registers and shared memory hold them (head
// dims up to 80, past 64 in narrower panels: panel_row_bytes_for; the consumers split dQ's
// rows), else 64 (dQ's wgmma M; they split its columns), with two ring
// slots (bench/NOTES.md entry 22: with one, or with split columns, it ran slower than the two
// deterministic kernels).
constexpr Tiles kPreferredWithDq[] = {
    {128, kBwdSm90BlockN, kBwdSm90Warps, 2},
    {64, kBwdSm90BlockN, kBwdSm90Warps, 2},
};
// Where the dK/dV kernel would split the columns over CTAs (each recomputing S^T and dP^T,
// and the dQ kernel both again), the dQ variant may take 64 keys a CTA and pair its consumers
// on them (kernels/bwd_dkdv_sm90.cuh), with two ring slots, at qk dims up to kPairedDqCols:
// 64-key CTAs add dQ up twice as often as 128-key ones, which the paired dK/dV-only kernel
// with the dQ kernel (bwd_dkdv_paired_sm90_path.cpp) outran at d176 and d192 (H100: 10-17%,
// causal too) but not at 128/256 (4% slower; bench/NOTES.md entry 43). Not elsewhere: one slot
// (d200, d256), unsplit heads (d136, 192/128) and the ordered adds (twice the key blocks a dQ
// tile waits for) ran 4-28% slower than the kernels they would replace (entry 34).
constexpr int kPairedKeys = fj::budget::kBwdDkDvSm90PairedKeys;
constexpr Tiles kPaired = {64, kPairedKeys, kBwdSm90Warps, 2};
constexpr int kPairedDqCols = 128;
// Where neither serves (192/128: 64-key consumers cannot hold dK and dV, and pairing them ran
// slower than the two kernels), the dQ variant may take 96 keys a CTA, 48 a consumer, its
// products swapped so that the keys are wgmma's N (kernels/bwd_dkdv_swapped_sm90.cuh):
// FlashAttention-3's tiles there. Any-order adds only, 64 query rows a step, whole columns in
// 128-byte panel rows; two ring slots, else (d192: FlashAttention-3's stages) Q in two, dO
// and dS^T in one (budget::bwd_dkdv_sm90_one_do_slot).
constexpr int kSwappedKeys = fj::budget::kBwdDkDvSm90SwappedKeys;
constexpr Tiles kSwappedTiles[] = {
    {64, kSwappedKeys, kBwdSm90Warps, 2},
    {64, kSwappedKeys, kBwdSm90Warps, 1},
};

// The shared memory of every variant at panel rows of `row_bytes`: the dK/dV-only kernel's
// column split, or the dQ variants' whole columns.
int shared_bytes_at(const PaddedDims& dims, const Tiles& t, int row_bytes, DqAdds adds) {
  const ColumnSplit split =
      adds == DqAdds::None ? bwd_dkdv_sm90_column_split(dims) : whole_columns(dims);
  const int dq_bytes =
      adds == DqAdds::None
          ? 0
          : fj::budget::bwd_dkdv_sm90_dq_bytes(dims.element_bytes, split.dk_slice, t.block_m,
                                               t.block_n, t.stages);
  return fj::budget::bwd_dkdv_sm90_shared_bytes(
      dims.element_bytes, row_bytes, dims.d_qk_pad, dims.d_v_pad, split.dk_slice, split.dv_slice,
      split.splits, t.block_m, t.block_n, t.stages, dq_bytes);
}

// 128-byte panel rows where the tiles fit so, else the narrowest padding
// (bwd_sm90_panel_row_bytes): with the tiles unchanged, 32-byte panels ran 8% slower at
// d100 and d136 on an H100, where d80 at 128 query rows a step (which only they hold) ran
// 14-20% faster than at 64 (bench/NOTES.md entry 41).
int panel_row_bytes_for(const PaddedDims& dims, const Tiles& t, DqAdds adds) {
  if (t.block_n == kPairedKeys || t.block_n == kSwappedKeys ||
      shared_bytes_at(dims, t, fj::budget::kPanelRowBytes, adds) <= max_shared_bytes("sm_90a"))
    return fj::budget::kPanelRowBytes;
  return fj::budget::bwd_sm90_panel_row_bytes(dims.d_qk_pad, dims.d_v_pad, dims.element_bytes);
}

int shared_bytes(const PaddedDims& dims, const Tiles& t) {
  return shared_bytes_at(dims, t, panel_row_bytes_for(dims, t, DqAdds::None), DqAdds::None);
}
int dq_variant_shared_bytes(const PaddedDims& dims, const Tiles& t, bool ordered) {
  const DqAdds adds = ordered ? DqAdds::KeyOrder : DqAdds::AnyOrder;
  return shared_bytes_at(dims, t, panel_row_bytes_for(dims, t, adds), adds);
}
int shared_bytes_with_dq(const PaddedDims& dims, const Tiles& t) {
  return dq_variant_shared_bytes(dims, t, false);
}
int shared_bytes_ordered(const PaddedDims& dims, const Tiles& t) {
  return dq_variant_shared_bytes(dims, t, true);
}

// The rules both variants share, for the column split `split` and a consumer's accumulator
// registers in the variant's order.
std::string common_tiles_problem(const Tiles& t, const ColumnSplit& split, int registers) {
  if (t.block_n != kBwdSm90BlockN || t.warps != kBwdSm90Warps)
    return fmt::format("the warp-specialised dK/dV kernel runs block_n {} with {} warps (a "
                       "producer and two consumer warp groups), not block_n {} with {}",
                       kBwdSm90BlockN, kBwdSm90Warps, t.block_n, t.warps);
  if (t.stages != 1 && t.stages != 2)
    return fmt::format("stages {}: the dK/dV kernel's ring has one or two slots", t.stages);
  if (split.dk_slice > 256 || split.dv_slice > 256)
    return fmt::format("dK/dV slices {}/{} exceed the wgmma N of 256", split.dk_slice,
                       split.dv_slice);
  if (registers > fj::budget::kBwdDkDvSm90MaxAccumulatorRegisters)
    return fmt::format("{} accumulator registers a consumer thread (more than {} spills)",
                       registers, fj::budget::kBwdDkDvSm90MaxAccumulatorRegisters);
  return "";
}

// The swapped consumers' rules (kSwapped's comment).
std::string swapped_tiles_problem(const PaddedDims& dims, const Tiles& t,
                                  const std::string& target, bool ordered) {
  if (ordered)
    return "swapped consumers (96 keys a CTA) add dQ in any order only, not in key-block order";
  if (t.block_m != fj::budget::kDqAccumTileRows || (t.stages != 1 && t.stages != 2) ||
      t.warps != kBwdSm90Warps)
    return fmt::format("swapped consumers run {} query rows a step in one or two ring slots "
                       "with {} warps, not block_m {}, {} slots, {} warps",
                       fj::budget::kDqAccumTileRows, kBwdSm90Warps, t.block_m, t.stages, t.warps);
  if (dims.d_qk_pad > 256 || dims.d_v_pad > 256)
    return fmt::format("head dims {}/{} (padded): swapped consumers run dQ's shares as wgmma N "
                       "of at most 256", dims.d_qk_pad, dims.d_v_pad);
  const int registers =
      fj::budget::bwd_dkdv_sm90_swapped_registers(dims.d_qk_pad, dims.d_v_pad);
  if (registers > fj::budget::kBwdDkDvSm90MaxAccumulatorRegisters)
    return fmt::format("{} accumulator registers a swapped consumer thread (more than {} spills)",
                       registers, fj::budget::kBwdDkDvSm90MaxAccumulatorRegisters);
  return shared_memory_problem(dq_variant_shared_bytes(dims, t, ordered), target);
}

std::string dq_variant_tiles_problem(const PaddedDims& dims, const Tiles& t,
                                     const std::string& target, bool ordered) {
  if (t.block_n == kPairedKeys) {
    if (t.block_m != fj::budget::kDqAccumTileRows)
      return fmt::format("paired consumers accumulating dQ run {} query rows a step (dQ's wgmma "
                         "M), not {}", fj::budget::kDqAccumTileRows, t.block_m);
    if (std::string problem = bwd_dkdv_sm90_paired_problem(dims, whole_columns(dims), t, true);
        !problem.empty())
      return problem;
    return shared_memory_problem(dq_variant_shared_bytes(dims, t, ordered), target);
  }
  if (t.block_n == kSwappedKeys) return swapped_tiles_problem(dims, t, target, ordered);
  if (t.block_m != 64 && t.block_m != 128)
    return fmt::format("block_m {} must be 64 or 128 (dQ's wgmma M, or two of them)", t.block_m);
  if (t.stages != 2)
    return fmt::format("stages {}: the dQ variant's ring has two slots at 128 keys", t.stages);
  const ColumnSplit split = whole_columns(dims);
  const int registers =
      fj::budget::bwd_dkdv_sm90_dq_step_registers(split.dk_slice, split.dv_slice, t.block_m);
  if (std::string problem = common_tiles_problem(t, split, registers); !problem.empty())
    return problem;
  return shared_memory_problem(dq_variant_shared_bytes(dims, t, ordered), target);
}
std::string tiles_problem_with_dq(const PaddedDims& dims, const Tiles& t,
                                  const std::string& target) {
  return dq_variant_tiles_problem(dims, t, target, false);
}
std::string tiles_problem_ordered(const PaddedDims& dims, const Tiles& t,
                                  const std::string& target) {
  return dq_variant_tiles_problem(dims, t, target, true);
}

// Those calls at dims some tiles hold.
bool serves(const Spec& spec, const std::string& target, const CallTraits& call) {
  return bwd_dkdv_sm90_serves_calls(spec, target, call) &&
         some_tiles_fit(kPreferred, padded_dims(spec), target, bwd_dkdv_sm90_tiles_problem);
}

// Whether the dQ variant pairs its consumers for this spec (kPaired's comment says where).
bool pairs_consumers(const Spec& spec, const std::string& target) {
  const PaddedDims dims = padded_dims(spec);
  return dims.d_qk_pad <= kPairedDqCols && bwd_dkdv_sm90_column_split(dims).splits > 1 &&
         tiles_problem_with_dq(dims, kPaired, target).empty();
}

// Whether the dQ variant swaps its consumers' products for this spec (kSwapped's comment says
// where).
bool swaps_products(const Spec& spec, const std::string& target) {
  const PaddedDims dims = padded_dims(spec);
  return !some_tiles_fit(kPreferredWithDq, dims, target, tiles_problem_with_dq) &&
         !pairs_consumers(spec, target) &&
         some_tiles_fit(kSwappedTiles, dims, target, tiles_problem_with_dq);
}

// The dQ variant's: those calls unless the spec asks for a deterministic backward (its dQ is
// a sum of reductions in whatever order the CTAs reach them), at dims its 128-key tiles hold,
// or where it pairs its consumers or swaps their products.
bool serves_with_dq(const Spec& spec, const std::string& target, const CallTraits& call) {
  return !spec.deterministic && bwd_dkdv_sm90_serves_calls(spec, target, call) &&
         (some_tiles_fit(kPreferredWithDq, padded_dims(spec), target, tiles_problem_with_dq) ||
          pairs_consumers(spec, target) || swaps_products(spec, target));
}

// The ordered variant's: the deterministic specs' calls whose dims the dQ variants' tiles hold.
// There it took less time than the two kernels at every dim measured (det / default on the
// H200 0.88-0.99 at d64-d128, against 0.68-0.87 at d40-d128: bench/NOTES.md entry 33).
bool serves_ordered(const Spec& spec, const std::string& target, const CallTraits& call) {
  return spec.deterministic && bwd_dkdv_sm90_serves_calls(spec, target, call) &&
         some_tiles_fit(kPreferredWithDq, padded_dims(spec), target, tiles_problem_ordered);
}

Tiles default_tiles(const Spec& spec, const std::string& target, const CallTraits&) {
  return first_fitting_tiles(kPreferred, spec, target, bwd_dkdv_sm90_tiles_problem,
                             "sm90 dK/dV");
}

Tiles default_tiles_with_dq(const Spec& spec, const std::string& target, const CallTraits&) {
  if (pairs_consumers(spec, target)) return kPaired;
  if (swaps_products(spec, target))
    return first_fitting_tiles(kSwappedTiles, spec, target, tiles_problem_with_dq,
                               "sm90 dK/dV/dQ (swapped)");
  return first_fitting_tiles(kPreferredWithDq, spec, target, tiles_problem_with_dq,
                             "sm90 dK/dV/dQ");
}

Tiles default_tiles_ordered(const Spec& spec, const std::string& target, const CallTraits&) {
  return first_fitting_tiles(kPreferredWithDq, spec, target, tiles_problem_ordered,
                             "sm90 dK/dV/dQ (ordered)");
}

std::vector<Tiles> tuning_grid(const Spec&) {
  return {std::begin(kPreferred), std::end(kPreferred)};
}

std::vector<Tiles> tuning_grid_with_dq(const Spec&) {
  std::vector<Tiles> grid(std::begin(kPreferredWithDq), std::end(kPreferredWithDq));
  grid.push_back(kPaired);
  for (const Tiles& t : kSwappedTiles) grid.push_back(t);
  return grid;
}

// The wgmma widths of S^T's and dP^T's products, dK's and dV's, and (with_dq) the two dQ
// shares', each also on its live columns where the kernel runs them so
// (budget::bwd_dkdv_sm90_live_widths).
std::vector<int> product_widths(const Plan& plan, bool with_dq) {
  using fj::budget::live_cols;
  const int dq_cols0 = fj::budget::bwd_dkdv_sm90_dq_cols0(plan.dk_slice);
  std::vector<int> widths = {plan.tiles.block_m, plan.dk_slice, plan.dv_slice};
  if (with_dq) widths.insert(widths.end(), {dq_cols0, plan.dk_slice - dq_cols0});
  if (!fj::budget::bwd_dkdv_sm90_live_widths(plan.dv_splits, plan.panel_row_bytes))
    return widths;
  const int qk = plan.spec.head_dim_qk;
  widths.insert(widths.end(),
                {live_cols(plan.dk_slice, qk), live_cols(plan.dv_slice, plan.spec.head_dim_v)});
  if (with_dq)
    widths.insert(widths.end(),
                  {live_cols(dq_cols0, qk), live_cols(plan.dk_slice - dq_cols0, qk - dq_cols0)});
  return widths;
}

// Adds the two consumers' dQ product widths, and swapped consumers' keys (S's, dP's, dK^T's
// and dV^T's N).
std::string extra_source_with_dq(const Plan& plan) {
  std::vector<int> widths = product_widths(plan, true);
  if (plan.tiles.block_n == kSwappedKeys) widths.push_back(kSwappedKeys / 2);
  return bwd_sm90_wgmma_source(plan, widths);
}

int panel_row_bytes(const PaddedDims& dims, const Tiles& t) {
  return panel_row_bytes_for(dims, t, DqAdds::None);
}
int panel_row_bytes_with_dq(const PaddedDims& dims, const Tiles& t) {
  return panel_row_bytes_for(dims, t, DqAdds::AnyOrder);
}
int panel_row_bytes_ordered(const PaddedDims& dims, const Tiles& t) {
  return panel_row_bytes_for(dims, t, DqAdds::KeyOrder);
}

std::string entry(const Plan& plan) { return bwd_sm90_entry(plan, "fj::bwd_dkdv_sm90"); }
std::string entry_with_dq(const Plan& plan) { return bwd_sm90_entry(plan, "fj::bwd_dkdv_dq_sm90"); }
std::string entry_ordered(const Plan& plan) {
  return bwd_sm90_entry(plan, "fj::bwd_dkdv_dq_ordered_sm90");
}

}  // namespace

bool bwd_dkdv_sm90_serves_calls(const Spec& spec, const std::string& target,
                                const CallTraits& call) {
  return target == "sm_90a" && spec.warp_specialization && spec.arch != Arch::Sm80 &&
         call.tma_loadable && (spec.mask == MaskKind::None || spec.mask == MaskKind::SlidingWindow);
}

std::string bwd_dkdv_sm90_paired_problem(const PaddedDims& dims, const ColumnSplit& split,
                                         const Tiles& t, bool accumulates_dq) {
  if (t.warps != kBwdSm90Warps || (t.stages != 1 && t.stages != 2))
    return fmt::format("paired consumers run in one or two ring slots with {} warps, not {} "
                       "slots, {} warps", kBwdSm90Warps, t.stages, t.warps);
  if (t.block_m % 16 != 0 || t.block_m < 16 || t.block_m > 128)
    return fmt::format("block_m {} must be a multiple of 16 in 16..128 (the wgmma N of S^T, "
                       "in k16 steps of dK's and dV's products)", t.block_m);
  if (accumulates_dq && (dims.d_qk_pad > 256 || dims.d_v_pad > 256))
    return fmt::format("head dims {}/{} (padded): paired consumers accumulating dQ run its "
                       "shares as wgmma N of at most 256", dims.d_qk_pad, dims.d_v_pad);
  const int registers = fj::budget::bwd_dkdv_sm90_paired_registers(
      split.dk_slice, split.dv_slice, t.block_m, accumulates_dq);
  if (registers > fj::budget::kBwdDkDvSm90MaxAccumulatorRegisters)
    return fmt::format("{} accumulator registers a paired consumer thread (more than {} spills)",
                       registers, fj::budget::kBwdDkDvSm90MaxAccumulatorRegisters);
  return "";
}

std::string bwd_dkdv_sm90_tiles_label(const Tiles& t) {
  return fmt::format("ws_m{}n{}s{}", t.block_m, t.block_n, t.stages);
}

std::string bwd_dkdv_sm90_extra_source(const Plan& plan) {
  return bwd_sm90_wgmma_source(plan, product_widths(plan, false));
}

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
  if (t.block_m % 16 != 0 || t.block_m < 16 || t.block_m > 128)
    return fmt::format("block_m {} must be a multiple of 16 in 16..128 (the wgmma N of S^T, "
                       "in k16 steps of dK's and dV's products)", t.block_m);
  const ColumnSplit split = bwd_dkdv_sm90_column_split(dims);
  const int registers =
      fj::budget::bwd_dkdv_sm90_consumer_registers(split.dk_slice, split.dv_slice, t.block_m);
  if (std::string problem = common_tiles_problem(t, split, registers); !problem.empty())
    return problem;
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
    .tiles_label = bwd_dkdv_sm90_tiles_label,
    .extra_source = bwd_dkdv_sm90_extra_source,
    .entry = entry,
    .panel_row_bytes = panel_row_bytes,
};

const KernelPathInfo kBwdDkDvDqSm90Path = {
    .id = KernelPath::BwdDkDvDqSm90,
    .name = "bwd_dkdv_dq_sm90",
    .label = "sm90",
    .kernel_prefix = "fa_bwd_dkdvdq",
    .step = Step::BwdDkDv,
    .template_file = "kernels/bwd_dkdv_sm90.cuh",
    .layout = "fj::Sm90BwdDkDvDqLayout",
    .persistent_grid = false,
    .tma_loads = true,
    .grid_over = GridOver::KeyRows,
    .serves = serves_with_dq,
    .default_tiles = default_tiles_with_dq,
    .tiles_problem = tiles_problem_with_dq,
    .tiles_in_mask_blocks = false,
    .column_split = whole_columns,
    .shared_bytes = shared_bytes_with_dq,
    .tuning_grid = tuning_grid_with_dq,
    .tuning_problem = no_tuning_problem,
    .tiles_label = bwd_dkdv_sm90_tiles_label,
    .extra_source = extra_source_with_dq,
    .entry = entry_with_dq,
    .panel_row_bytes = panel_row_bytes_with_dq,
    .accumulates_dq = true,
};

const KernelPathInfo kBwdDkDvDqOrderedSm90Path = {
    .id = KernelPath::BwdDkDvDqOrderedSm90,
    .name = "bwd_dkdv_dq_ordered_sm90",
    .label = "sm90",
    .kernel_prefix = "fa_bwd_dkdvdq_ordered",
    .step = Step::BwdDkDv,
    .template_file = "kernels/bwd_dkdv_sm90.cuh",
    .layout = "fj::Sm90BwdDkDvDqOrderedLayout",
    .persistent_grid = false,
    .tma_loads = true,
    .grid_over = GridOver::KeyRows,
    .serves = serves_ordered,
    .default_tiles = default_tiles_ordered,
    .tiles_problem = tiles_problem_ordered,
    .tiles_in_mask_blocks = false,
    .column_split = whole_columns,
    .shared_bytes = shared_bytes_ordered,
    .tuning_grid = tuning_grid_with_dq,
    .tuning_problem = no_tuning_problem,
    .tiles_label = bwd_dkdv_sm90_tiles_label,
    .extra_source = extra_source_with_dq,
    .entry = entry_ordered,
    .panel_row_bytes = panel_row_bytes_ordered,
    .accumulates_dq = true,
    .orders_dq_adds = true,
};

}  // namespace flashjit::gen
