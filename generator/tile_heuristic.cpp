#include "generator/tile_heuristic.h"

#include <fmt/format.h>

#include <algorithm>

#include "generator/plan.h"

namespace flashjit::gen {

namespace {

// Row stride of a shared tile: an odd number of 16-byte units (see conflict_free_stride).
int conflict_free_stride(int cols) {
  const int units = cols / 8;
  return 8 * (units % 2 == 1 ? units : units + 1);
}

int round_up(int x, int m) { return (x + m - 1) / m * m; }

}  // namespace

PaddedDims padded_dims(const Spec& spec) {
  constexpr int kMaxSlice = 256;
  PaddedDims d;
  d.d_qk_pad = round_up(spec.head_dim_qk, 16);
  d.d_v_pad = round_up(spec.head_dim_v, 16);
  d.dv_splits = (d.d_v_pad + kMaxSlice - 1) / kMaxSlice;
  d.dv_slice = round_up((d.d_v_pad + d.dv_splits - 1) / d.dv_splits, 16);
  return d;
}

int sm80_shared_bytes(int d_qk_pad, int dv_slice, const Tiles& t) {
  const int qk = conflict_free_stride(d_qk_pad);
  const int vs = conflict_free_stride(dv_slice);
  return 2 * (t.block_m * qk + t.stages * (t.block_n * qk + t.block_n * vs));
}

std::string sm80_tiles_problem(int d_qk_pad, int dv_slice, const Tiles& t,
                               const std::string& target) {
  if (t.warps < 1 || t.block_m % (16 * t.warps) != 0)
    return fmt::format("block_m {} must be a multiple of 16 * warps ({})", t.block_m,
                       16 * t.warps);
  if (t.block_n < 16 || t.block_n % 16 != 0)
    return fmt::format("block_n {} must be a positive multiple of 16", t.block_n);
  if (t.stages < 2) return fmt::format("stages {}: the sm80 pipeline needs at least 2", t.stages);
  const int bytes = sm80_shared_bytes(d_qk_pad, dv_slice, t);
  if (bytes > max_shared_bytes(target))
    return fmt::format("they need {} bytes of shared memory; {} allows {}", bytes, target,
                       max_shared_bytes(target));
  return "";
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
  t.block_m = largest_divisor(t.block_m, spec.block_q);
  t.block_n = largest_divisor(t.block_n, spec.block_k);
  while (t.block_m % (16 * t.warps) != 0) t.warps /= 2;
  return t;
}

Tiles sm80_default_tiles(const Spec& spec, const std::string& target) {
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
  for (const Tiles& candidate : preferred) {
    const Tiles t = fit_tiles_to_mask(spec, candidate);
    if (sm80_tiles_problem(dims.d_qk_pad, dims.dv_slice, t, target).empty()) return t;
  }
  throw Error(ErrorKind::Usage,
              fmt::format("no sm80 tile configuration fits head dims {}/{} on {}",
                          spec.head_dim_qk, spec.head_dim_v, target));
}

Tiles default_tiles(const Spec& spec, const std::string& target) {
  return sm90_serves(spec, target) ? sm90_default_tiles(spec, target)
                                   : sm80_default_tiles(spec, target);
}

std::string tiles_problem(const Spec& spec, const std::string& target, const Tiles& tiles,
                          KernelPath path) {
  const PaddedDims dims = padded_dims(spec);
  const std::string problem =
      path == KernelPath::Sm90 ? sm90_tiles_problem(dims.d_qk_pad, dims.dv_slice, tiles, target)
                               : sm80_tiles_problem(dims.d_qk_pad, dims.dv_slice, tiles, target);
  return problem.empty() ? mask_tiles_problem(spec, tiles) : problem;
}

std::string tiles_problem(const Spec& spec, const std::string& target, const Tiles& tiles) {
  return tiles_problem(spec, target, tiles,
                       sm90_serves(spec, target) ? KernelPath::Sm90 : KernelPath::Sm80);
}

}  // namespace flashjit::gen
