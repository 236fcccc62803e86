#include "generator/fwd_sm90_path.h"

#include <fmt/format.h>

#include <algorithm>

#include "generator/element_types.h"
#include "generator/plan.h"
#include "generator/wgmma_emit.h"

namespace flashjit::gen {
namespace {

// The warp-specialised kernel needs sm_90a, hopper.warp_specialization, a mask it serves and
// tensors TMA can load; `arch: sm80` keeps the mma.sync kernel.
bool serves(const Spec& spec, const std::string& target, const CallTraits& call) {
  return target == "sm_90a" && spec.warp_specialization && spec.arch != Arch::Sm80 &&
         sm90_serves_mask(spec) && call.tma_loadable;
}

std::vector<Tiles> tuning_grid(const Spec&) {
  // The kernel's knobs: the key block (wgmma N of S) and the ring depth.
  std::vector<Tiles> grid;
  for (int block_n : {48, 64, 80, 96, 112, 128, 160, 176, 192})
    for (int stages : {2, 3, 4}) grid.push_back(Tiles{kSm90BlockM, block_n, kSm90Warps, stages});
  return grid;
}

std::string tuning_problem(const PaddedDims&, const Tiles&) { return ""; }

std::string ws_tiles_label(const Tiles& t) { return fmt::format("ws_n{}s{}", t.block_n, t.stages); }

std::string extra_source(const Plan& plan) {
  std::string out = "\n// ---- the wgmma shapes this kernel uses\nnamespace fj {\n";
  out += emit_wgmma(plan.spec.dtype, plan.tiles.block_n);
  if (plan.dv_slice != plan.tiles.block_n) out += emit_wgmma(plan.spec.dtype, plan.dv_slice);
  return out + "}  // namespace fj\n";
}

std::string entry(const Plan& plan) {
  return fmt::format(
      "// One CTA a multiprocessor: 384 threads, and setmaxnreg needs the bound to hold.\n"
      "extern \"C\" __global__ void __launch_bounds__({}, 1) {}(\n"
      "    const FwdParams params, const __grid_constant__ fj::TmaDesc tm_q,\n"
      "    const __grid_constant__ fj::TmaDesc tm_k, const __grid_constant__ fj::TmaDesc tm_v) {{\n"
      "  fj::fwd_sm90<KernelConfig>(params, &tm_q, &tm_k, &tm_v);\n"
      "}}\n",
      plan.threads, plan.kernel_name);
}

}  // namespace

const KernelPathInfo kFwdSm90Path = {
    .id = KernelPath::FwdSm90,
    .name = "fwd_sm90",
    .label = "sm90",
    .kernel_prefix = "fa_fwd",
    .step = Step::Forward,
    .template_file = "kernels/fwd_sm90.cuh",
    .layout = "fj::Sm90FwdLayout",
    .persistent_grid = true,
    .tma_loads = true,
    .grid_over = GridOver::QueryRows,
    .serves = serves,
    .default_tiles = sm90_default_tiles,
    .tiles_problem = sm90_tiles_problem,
    .tiles_in_mask_blocks = true,
    .column_split = forward_column_split,
    .shared_bytes = sm90_shared_bytes,
    .tuning_grid = tuning_grid,
    .tuning_problem = tuning_problem,
    .tiles_label = ws_tiles_label,
    .extra_source = extra_source,
    .entry = entry,
};

int sm90_shared_bytes(const PaddedDims& dims, const Tiles& t) {
  return fj::budget::fwd_sm90_shared_bytes(dims.element_bytes, dims.d_qk_pad, dims.dv_slice,
                                           t.block_m, t.block_n, t.stages);
}

int sm90_consumer_registers(int dv_slice, const Tiles& t) {
  return fj::budget::fwd_sm90_consumer_registers(dv_slice, t.block_n);
}

std::string sm90_tiles_problem(const PaddedDims& dims, const Tiles& t, const std::string& target) {
  if (t.block_m != kSm90BlockM || t.warps != kSm90Warps)
    return fmt::format("the warp-specialised kernel runs block_m {} with {} warps (a producer "
                       "and two consumer warp groups), not block_m {} with {}",
                       kSm90BlockM, kSm90Warps, t.block_m, t.warps);
  if (t.block_n < 16 || t.block_n > 256 || t.block_n % 16 != 0)
    return fmt::format("block_n {} must be a multiple of 16 from 16 to 256 (the wgmma N of S)",
                       t.block_n);
  if (t.stages < 2) return fmt::format("stages {}: the K/V ring needs at least 2", t.stages);
  const std::string memory = shared_memory_problem(sm90_shared_bytes(dims, t), target);
  if (!memory.empty()) return memory;
  if (sm90_consumer_registers(dims.dv_slice, t) > kSm90MaxAccumulatorRegisters)
    return fmt::format("O, S and P take {} registers a consumer thread (more than {} spills)",
                       sm90_consumer_registers(dims.dv_slice, t), kSm90MaxAccumulatorRegisters);
  return "";
}

Tiles sm90_default_tiles(const Spec& spec, const std::string& target, const CallTraits&) {
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
      if (sm90_tiles_problem(dims, t, target).empty() && mask_tiles_problem(spec, t).empty())
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
