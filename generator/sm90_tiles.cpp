// The sm90 (warp-specialised) kernel's shared-memory footprint, its tile rules and its
// built-in choice of tiles. Mirrors Sm90FwdLayout in templates/kernels/fwd_sm90.cuh; the emitted
// source static_asserts that both agree on the shared memory.
#include <fmt/format.h>

#include <algorithm>

#include "generator/plan.h"
#include "generator/tile_heuristic.h"

namespace flashjit::gen {

namespace {

constexpr int kPanelRowBytes = 128;  // a 64-column panel row: TMA's 128-byte swizzle span

int panels(int cols) { return (cols + 63) / 64; }

}  // namespace

int sm90_shared_bytes(int d_qk_pad, int dv_slice, const Tiles& t) {
  const int q = panels(d_qk_pad) * t.block_m * kPanelRowBytes;
  const int kv = (panels(d_qk_pad) + panels(dv_slice)) * t.block_n * kPanelRowBytes;
  // q_full and q_empty a consumer and three a ring slot, 8 bytes each, then two tile infos.
  const int barriers = 8 * (4 + 3 * t.stages) + 16;
  return q + t.stages * kv + barriers + 1024;  // + the slack that aligns the tiles to 1024
}

int sm90_consumer_registers(int dv_slice, const Tiles& t) {
  // fp32 O (dv/2) and S (block_n/2), and P packed to 16 bits (block_n/4), a thread.
  return dv_slice / 2 + t.block_n / 2 + t.block_n / 4;
}

std::string sm90_tiles_problem(int d_qk_pad, int dv_slice, const Tiles& t,
                               const std::string& target) {
  if (t.block_m != kSm90BlockM || t.warps != kSm90Warps)
    return fmt::format("the warp-specialised kernel runs block_m {} with {} warps (a producer "
                       "and two consumer warp groups), not block_m {} with {}",
                       kSm90BlockM, kSm90Warps, t.block_m, t.warps);
  if (t.block_n < 16 || t.block_n > 256 || t.block_n % 16 != 0)
    return fmt::format("block_n {} must be a multiple of 16 from 16 to 256 (the wgmma N of S)",
                       t.block_n);
  if (t.stages < 2) return fmt::format("stages {}: the K/V ring needs at least 2", t.stages);
  const int bytes = sm90_shared_bytes(d_qk_pad, dv_slice, t);
  if (bytes > max_shared_bytes(target))
    return fmt::format("they need {} bytes of shared memory; {} allows {}", bytes, target,
                       max_shared_bytes(target));
  if (sm90_consumer_registers(dv_slice, t) > kSm90MaxAccumulatorRegisters)
    return fmt::format("O, S and P take {} registers a consumer thread (more than {} spills)",
                       sm90_consumer_registers(dv_slice, t), kSm90MaxAccumulatorRegisters);
  return "";
}

Tiles sm90_default_tiles(const Spec& spec, const std::string& target) {
  const PaddedDims dims = padded_dims(spec);
  const int d = std::max(dims.d_qk_pad, dims.dv_slice);
  // Measured on the H200 (flashjit tune, bf16, 16k tokens; bench/NOTES.md entry 6): a third
  // ring slot is worth more than a wider key block (d128: n128 s3 is 1.36x n128 s2, as the
  // consumers hold slot n-1 for P V while S(n) is computed, so two slots leave the producer
  // nothing to fill), so take the widest key block up to the preferred one that fits three
  // slots, down to 48 keys; wider dims fall back to two slots. With a block mask, only key
  // blocks that divide the mask's block_k count. Unmasked d <= 64 prefers 176 keys (NOTES
  // entry 10: 474 against 445 TFLOP/s at 16k tokens, level at 4k); under causal or window
  // masking the wider block masks more keys a diagonal tile and loses 2-6%.
  const bool wide_keys = d <= 64 && !spec.causal && spec.mask == MaskKind::None;
  const int preferred_n =
      wide_keys ? 176 : d <= 128 ? 128 : d <= 192 ? 112 : d <= 256 ? 80 : 64;
  for (int stages : {3, 2}) {
    const int narrowest = stages == 3 ? 48 : 16;
    for (int block_n = preferred_n; block_n >= narrowest; block_n -= 16) {
      const Tiles t{kSm90BlockM, block_n, kSm90Warps, stages};
      if (sm90_tiles_problem(dims.d_qk_pad, dims.dv_slice, t, target).empty() &&
          mask_tiles_problem(spec, t).empty())
        return t;
    }
  }
  throw Error(ErrorKind::Usage,
              fmt::format("no sm90 tile configuration fits head dims {}/{} on {}",
                          spec.head_dim_qk, spec.head_dim_v, target));
}

bool sm90_serves_mask(const Spec& spec) {
  if (spec.mask != MaskKind::BlockSparse && spec.mask != MaskKind::Pattern) return true;
  return spec.block_q % kSm90BlockM == 0;
}

}  // namespace flashjit::gen
