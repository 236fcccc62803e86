#include "generator/tile_rules.h"

#include <fmt/format.h>

#include "generator/element_types.h"
#include "generator/targets.h"

namespace flashjit::gen {

int round_up(int x, int multiple) { return (x + multiple - 1) / multiple * multiple; }

int ceil_div(int x, int y) { return (x + y - 1) / y; }

std::string tiles_label(const Tiles& t) {
  return fmt::format("m{}n{}w{}s{}", t.block_m, t.block_n, t.warps, t.stages);
}

PaddedDims padded_dims(const Spec& spec) {
  constexpr int kMaxSlice = 256;
  // head_dim_qk is the k of S = Q K^T; head_dim_v is padded to whole n16 column pairs, which
  // the V fragments (ldmatrix .trans, wgmma's B) are loaded in.
  const ElementType& element = element_type(spec.dtype);
  PaddedDims d;
  d.element_bytes = element.bytes;
  d.d_qk_pad = round_up(spec.head_dim_qk, element.mma_k);
  d.d_v_pad = round_up(spec.head_dim_v, 16);
  d.dv_splits = (d.d_v_pad + kMaxSlice - 1) / kMaxSlice;
  d.dv_slice = round_up((d.d_v_pad + d.dv_splits - 1) / d.dv_splits, 16);
  return d;
}

ColumnSplit forward_column_split(const PaddedDims& dims) {
  return {.dk_slice = dims.d_qk_pad, .dv_slice = dims.dv_slice, .splits = dims.dv_splits};
}

std::string mask_tiles_problem(const Spec& spec, const Tiles& t) {
  if (spec.block_q == 0) return "";
  if (t.block_m == 0 || spec.block_q % t.block_m != 0)
    return fmt::format("block_m {} does not divide the mask's block_q {}", t.block_m, spec.block_q);
  if (t.block_n == 0 || spec.block_k % t.block_n != 0)
    return fmt::format("block_n {} does not divide the mask's block_k {}", t.block_n, spec.block_k);
  return "";
}

Tiles fit_tiles_to_mask(const Spec& spec, Tiles t) {
  if (spec.block_q == 0) return t;
  // 16 divides every mask block (validated), so the search always ends.
  const auto largest_divisor = [](int limit, int block) {
    int x = limit - limit % 16;
    while (block % x != 0) x -= 16;
    return x;
  };
  // Each warp keeps the rows the preferred tiling gave it: the warps, not their m16 tiles,
  // are cut with block_m. Those tilings were chosen (and measured spill-free) for their
  // per-warp layout. A warp left with one m16 tile reloads every K/V fragment for 16 rows,
  // and its kernel needs so few registers that ptxas, which knows the CTA's threads but not
  // that shared memory caps the CTAs an SM holds, aims at a higher occupancy (96 or 128
  // registers a thread) and spills to reach it: pattern masks of 64-row blocks at d80 and
  // d112 on sm_80, d48 on sm_90a (NVRTC 13.0).
  const int rows_per_warp = t.block_m / t.warps;
  t.block_m = largest_divisor(t.block_m, spec.block_q);
  t.block_n = largest_divisor(t.block_n, spec.block_k);
  while (t.warps > 1 && (t.block_m % (16 * t.warps) != 0 || t.block_m / t.warps < rows_per_warp))
    t.warps /= 2;
  return t;
}

std::string shared_memory_problem(int bytes, const std::string& target) {
  if (bytes <= max_shared_bytes(target)) return "";
  return fmt::format("they need {} bytes of shared memory; {} allows {}", bytes, target,
                     max_shared_bytes(target));
}

}  // namespace flashjit::gen
