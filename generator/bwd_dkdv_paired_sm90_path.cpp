// bwd_dkdv_paired_sm90: the sm90 dK/dV-only kernel with 64 keys a CTA and its two consumers
// paired on them (templates/kernels/bwd_dkdv_paired_sm90.cuh), where bwd_dkdv_sm90 would split
// the columns over CTAs that each recompute S^T and dP^T. Each consumer holding one of dK and
// dV, it holds whole columns up to about d368, and past that splits them in half as often
// (d512: two CTAs a key block where bwd_dkdv_sm90 would need four, and K and V of 128 keys
// would not fit its shared memory). It serves the calls the dQ variants leave: deterministic
// specs, qk dims past 128 (d176, d192), dims whose dQ stages leave no room for two ring slots
// (d200, d256) and those past 256 columns. bwd_dq_sm90 (or bwd_dq_sm80) computes dQ after it.
#include <fmt/format.h>

#include <vector>

#include "generator/bwd_dkdv_sm90_path.h"
#include "generator/bwd_sm90_source.h"
#include "generator/plan.h"

namespace flashjit::gen {
namespace {

constexpr int kPairedKeys = fj::budget::kBwdDkDvSm90PairedKeys;

// Preferred first: the most query rows a step with two ring slots (fewer steps, and S^T's and
// dP^T's wgmma N wider), then one slot. The tuner agreed at deterministic causal d192 on the
// H200 (96 rows fastest at 4k and 16k tokens; 64 by 3% at 1k: bench/NOTES.md entry 35).
// Sixteen rows in two slots before 32 in one where K and V of 64 keys leave room for no
// more (d512): with one slot the next tile's load waits for both consumers' last product.
constexpr Tiles kPreferred[] = {
    {96, kPairedKeys, kBwdSm90Warps, 2}, {80, kPairedKeys, kBwdSm90Warps, 2},
    {64, kPairedKeys, kBwdSm90Warps, 2}, {48, kPairedKeys, kBwdSm90Warps, 2},
    {32, kPairedKeys, kBwdSm90Warps, 2}, {64, kPairedKeys, kBwdSm90Warps, 1},
    {16, kPairedKeys, kBwdSm90Warps, 2}, {32, kPairedKeys, kBwdSm90Warps, 1},
};

// The query rows a step beside which a consumer must hold its slice
// (bwd_dkdv_paired_sm90_column_split).
constexpr int kSplitRows = 32;

int shared_bytes(const PaddedDims& dims, const Tiles& t) {
  const ColumnSplit split = bwd_dkdv_paired_sm90_column_split(dims);
  return fj::budget::bwd_dkdv_sm90_shared_bytes(
      dims.element_bytes, fj::budget::kPanelRowBytes, dims.d_qk_pad, dims.d_v_pad, split.dk_slice,
      split.dv_slice, split.splits, t.block_m, t.block_n, t.stages, 0);
}

std::string tiles_problem(const PaddedDims& dims, const Tiles& t, const std::string& target) {
  if (t.block_n != kPairedKeys)
    return fmt::format("the paired dK/dV kernel runs block_n {} (both consumers on its keys), "
                       "not {}", kPairedKeys, t.block_n);
  if (std::string problem = bwd_dkdv_sm90_paired_problem(
          dims, bwd_dkdv_paired_sm90_column_split(dims), t, false);
      !problem.empty())
    return problem;
  return shared_memory_problem(shared_bytes(dims, t), target);
}

// Only where bwd_dkdv_sm90 splits the columns: unsplit, its 128-key CTAs ran 6-18% faster
// than the pairing (bench/NOTES.md entry 35: d136, d160, 192/128).
bool serves(const Spec& spec, const std::string& target, const CallTraits& call) {
  const PaddedDims dims = padded_dims(spec);
  return bwd_dkdv_sm90_serves_calls(spec, target, call) &&
         bwd_dkdv_sm90_column_split(dims).splits > 1 &&
         some_tiles_fit(kPreferred, dims, target, tiles_problem);
}

Tiles default_tiles(const Spec& spec, const std::string& target, const CallTraits&) {
  return first_fitting_tiles(kPreferred, spec, target, tiles_problem, "sm90 paired dK/dV");
}

std::vector<Tiles> tuning_grid(const Spec&) {
  return {std::begin(kPreferred), std::end(kPreferred)};
}

std::string entry(const Plan& plan) { return bwd_sm90_entry(plan, "fj::bwd_dkdv_sm90"); }

}  // namespace

ColumnSplit bwd_dkdv_paired_sm90_column_split(const PaddedDims& dims) {
  for (int splits = 1;; ++splits) {
    const ColumnSplit split =
        splits == 1 ? whole_columns(dims)
                    : ColumnSplit{.dk_slice = round_up(ceil_div(dims.d_qk_pad, splits), 64),
                                  .dv_slice = round_up(ceil_div(dims.d_v_pad, splits), 64),
                                  .splits = splits};
    if (fj::budget::bwd_dkdv_sm90_paired_registers(split.dk_slice, split.dv_slice, kSplitRows,
                                                   false) <=
        fj::budget::kBwdDkDvSm90MaxAccumulatorRegisters)
      return split;
  }
}

const KernelPathInfo kBwdDkDvPairedSm90Path = {
    .id = KernelPath::BwdDkDvPairedSm90,
    .name = "bwd_dkdv_paired_sm90",
    .label = "sm90",
    .kernel_prefix = "fa_bwd_dkdv_paired",
    .step = Step::BwdDkDv,
    .template_file = "kernels/bwd_dkdv_sm90.cuh",
    .layout = "fj::Sm90BwdDkDvLayout",
    .persistent_grid = false,
    .tma_loads = true,
    .grid_over = GridOver::KeyRows,
    .serves = serves,
    .default_tiles = default_tiles,
    .tiles_problem = tiles_problem,
    .tiles_in_mask_blocks = false,
    .column_split = bwd_dkdv_paired_sm90_column_split,
    .shared_bytes = shared_bytes,
    .tuning_grid = tuning_grid,
    .tuning_problem = no_tuning_problem,
    .tiles_label = bwd_dkdv_sm90_tiles_label,
    .extra_source = bwd_dkdv_sm90_extra_source,
    .entry = entry,
};

}  // namespace flashjit::gen
