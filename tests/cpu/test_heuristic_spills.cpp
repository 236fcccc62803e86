// The heuristics' tiles do not spill (issue 18 item 8): the sm80 path's register
// budget counts the mask's registers, fitting tiles to a block mask keeps each warp's rows,
// and the kernels whose heuristic tiles once spilled compile clean. scripts/spill_sweep.py
// sweeps the whole grid; these are its regressions.
#include <doctest/doctest.h>

#include <string>

#include "flashjit/flashjit.h"
#include "generator/emit.h"
#include "generator/dec_sm80_path.h"
#include "generator/fwd_sm80_path.h"
#include "generator/kernel_path.h"
#include "generator/plan.h"
#include "generator/targets.h"
#include "generator/tile_rules.h"
#include "runtime/kernel_compiler.h"
#include "runtime/operation.h"
#include "tests/cpu/runtime_test_support.h"

namespace flashjit::gen {
namespace {

constexpr const char* kMasks[] = {
    "none", "{sliding_window: {left: 253, right: 61}}",
    "{block_sparse: {block_q: 128, block_k: 128}}",
    "{pattern: {kind: global_local, block: 64, global_blocks: 2, window_blocks: 3}}"};
constexpr const char* kPattern64 = kMasks[3];

Spec spec_with(int head_dim, const std::string& mask, const char* dtype = "bf16") {
  return Spec::from_yaml("head_dim: " + std::to_string(head_dim) + "\ndtype: " + dtype +
                         "\nmask: " + mask + "\n");
}

CompileReport compile(const Plan& plan) {
  test::ScopedEnv no_cache("FLASHJIT_DISABLE_CACHE", "1");
  static const rt::BundleRegistry no_bundles;
  rt::KernelCompiler compiler(rt::DiskCache::from_env(), no_bundles);
  return compiler.compile(plan)->report;
}

// Compiles `plan` with NVRTC and checks that ptxas spilled nothing.
void check_compiles_clean(const Plan& plan) {
  CAPTURE(plan.kernel_name);
  const CompileReport report = compile(plan);
  CHECK(report.spill_store_bytes == 0);
  CHECK(report.spill_load_bytes == 0);
}

}  // namespace

TEST_CASE("heuristic: fitting tiles to a block mask cuts warps, keeping each warp's rows") {
  const Spec pattern = spec_with(64, kPattern64);
  CHECK(fit_tiles_to_mask(pattern, Tiles{128, 64, 4, 3}) == Tiles{64, 64, 2, 3});
  // One m16 tile a warp already: the warps halve with block_m.
  CHECK(fit_tiles_to_mask(pattern, Tiles{128, 64, 8, 2}) == Tiles{64, 64, 4, 2});
  // Tiles inside the blocks keep their warps.
  CHECK(fit_tiles_to_mask(spec_with(64, kMasks[2]), Tiles{128, 64, 4, 3}) ==
        Tiles{128, 64, 4, 3});
}

TEST_CASE("heuristic: the sm80 tiles' accumulators and mask state fit the register budget") {
  for (const char* mask : kMasks)
    for (const std::string target : {"sm_80", "sm_86", "sm_90a"})
      for (int d = 1; d <= 512; d += 5) {
        const Spec spec = spec_with(d, mask);
        const Plan plan = make_plan(spec, target, {.align_bytes = 16, .tma_loadable = false});
        if (plan.path->id != KernelPath::FwdSm80) continue;
        CAPTURE(plan.kernel_name);
        CHECK(sm80_accumulator_registers(plan.dv_slice, plan.tiles) + sm80_mask_registers(spec) <=
              kSm80MaxAccumulatorRegisters);
      }
  // The window's and the block mask's registers are what move d96 off m128 n64 w4 (192
  // accumulator registers), which spilled 60 and 72 bytes with them.
  CHECK(sm80_default_tiles(spec_with(96, "none"), "sm_80") == Tiles{128, 64, 4, 2});
  CHECK(sm80_default_tiles(spec_with(96, kMasks[1]), "sm_80") == Tiles{128, 64, 8, 2});
  CHECK(sm80_default_tiles(spec_with(96, kMasks[2]), "sm_80") == Tiles{128, 64, 8, 2});
}

TEST_CASE("heuristic: the kernels whose heuristic tiles spilled compile clean (NVRTC)") {
  struct Case {
    int head_dim;
    const char* mask;
    const char* dtype;
    const char* target;
  };
  // Each spilled with the heuristic before this rule (spill_sweep.py, NVRTC 13.0).
  const Case cases[] = {
      {97, kPattern64, "fp16", "sm_80"},  // m64 n32 w4: 20 bytes
      {77, kPattern64, "fp16", "sm_80"},  // m64 n64 w4: 24 bytes
      {80, kPattern64, "bf16", "sm_90a"}, // m64 n64 w4 (the sm80 kernel): 24 bytes
      {33, kPattern64, "bf16", "sm_90a"}, // m64 n64 w4 s3: 4 bytes
      {81, kMasks[1], "bf16", "sm_80"},   // m128 n64 w4: 60 bytes
      {96, kMasks[2], "bf16", "sm_80"},   // m128 n64 w4: 72 bytes
  };
  for (const Case& c : cases) {
    const Plan plan = make_plan(spec_with(c.head_dim, c.mask, c.dtype), c.target);
    check_compiles_clean(plan);
  }
  // These spilled at ptxas's own aim of three CTAs (168 registers) before the launch bounds
  // named the CTAs shared memory allows: qk33 causal m128 n64 w4 s3, 4 bytes; 192/128 with
  // the pattern m64 n64 w4, 12 bytes.
  for (const char* yaml : {"head_dim: 33\ncausal: true\n",
                           "head_dim_qk: 192\nhead_dim_v: 128\nmask: {pattern: {kind: "
                           "global_local, block: 64, global_blocks: 2, window_blocks: 3}}\n"}) {
    const Plan plan = make_plan(Spec::from_yaml(yaml), "sm_80");
    check_compiles_clean(plan);
  }
}

TEST_CASE("heuristic: the backward's and decode's kernels that spilled compile clean (NVRTC)") {
  // The dQ kernel's m128 n64 w8 at the 128 registers ptxas gives it with a mask, at head dims
  // that pad to 48 or 64: qk33 block-sparse spilled 8 bytes on sm_80; qk33 causal and window
  // (sm_80), qk49 window (sm_80) and block-sparse (sm_90a) 4 bytes each once its products ran
  // through warp_products.cuh. Every launch of the backward is compiled.
  struct BackwardCase {
    Spec spec;
    const char* target;
  };
  const BackwardCase backward_cases[] = {
      {spec_with(33, kMasks[2]), "sm_80"},
      {Spec::from_yaml("head_dim: 33\ncausal: true\n"), "sm_80"},
      {spec_with(33, kMasks[1]), "sm_80"},
      {spec_with(49, kMasks[1]), "sm_80"},
      {spec_with(49, kMasks[2]), "sm_90a"},
  };
  for (const BackwardCase& c : backward_cases)
    for (const Plan& plan : rt::plan_backward(c.spec, c.target, {}).launches) {
      check_compiles_clean(plan);
    }
  // The sm90 dK/dV/dQ kernels at the register budget's 208 (d72 and d80 at 128 query rows a
  // step, in 32-byte panels; the ordered one too), and d64's ordered kernel, which spilled
  // 8-12 bytes with the shared-memory base taken as declared rather than rounded up.
  for (const char* yaml : {"head_dim: 72\n",
                           "head_dim: 80\ncausal: true\nbackward: {deterministic: true}\n",
                           "head_dim: 64\ncausal: true\nbackward: {deterministic: true}\n"}) {
    const Plan plan = rt::plan_backward(Spec::from_yaml(yaml), "sm_90a", {}).launches[1];
    CHECK(plan.tiles.block_m == 128);
    check_compiles_clean(plan);
  }
  // Decode's split kernel, dense and paged: 16 rows of d256 causal on sm_90a (255 registers,
  // 4-8 bytes, before the copies' unroll cap) and 48 rows of d80 causal (before the mask's
  // budget); the 8-row tile where it holds the most registers, d256 and d512 (V slices of
  // 256) with a window.
  struct DecodeCase {
    const char* yaml;
    int packed_rows;
  };
  for (const DecodeCase& c :
       {DecodeCase{"head_dim: 256\ncausal: true\n", 16},
        DecodeCase{"head_dim: 80\ncausal: true\n", 48},
        DecodeCase{"head_dim: 256\nmask: {sliding_window: {left: 253, right: 61}}\n", 8},
        DecodeCase{"head_dim: 512\nmask: {sliding_window: {left: 253, right: 61}}\n", 1}})
    for (bool paged : {false, true}) {
      const Spec spec = Spec::from_yaml(c.yaml);
      const Plan plan = rt::plan_decode(spec, "sm_90a", {.paged = paged},
                                        dec_sm80_tiles(spec, "sm_90a", c.packed_rows))
                            .launches[0];
      if (c.packed_rows <= 8) CHECK(plan.tiles.block_m == 8);
      check_compiles_clean(plan);
    }
}

TEST_CASE("heuristic: packed rows of a narrow alignment get the sm80 forward's smaller tiles "
          "and launch bounds that leave 255 registers, and compile clean (NVRTC)") {
  // The forward past d 384 (d500 with a window, 8-byte rows): 16-key tiles, not m64 n32 w4.
  const Spec wide = spec_with(500, kMasks[1]);
  const CallTraits a8{.align_bytes = 8, .tma_loadable = false};
  CHECK(sm80_default_tiles(wide, "sm_80") == Tiles{64, 32, 4, 2});
  const Plan forward = make_plan(wide, "sm_80", a8);
  CHECK(forward.tiles == Tiles{64, 16, 4, 2});
  check_compiles_clean(forward);
  // 2-byte rows, copied an element at a time, count against the register budget: d83 causal
  // takes eight warps of one m16 tile each, not four of two.
  const Spec causal83 = Spec::from_yaml("head_dim: 83\ncausal: true\n");
  CHECK(sm80_default_tiles(causal83, "sm_80") == Tiles{128, 64, 4, 2});
  const Plan element_rows =
      make_plan(causal83, "sm_80", {.align_bytes = 2, .tma_loadable = false});
  CHECK(element_rows.tiles == Tiles{128, 64, 8, 2});
  check_compiles_clean(element_rows);
  // The sm80 dQ kernel (d59, 2-byte rows) and decode's split kernel (32 rows of d68 on
  // sm_90a and of d20 on sm_80, 8-byte rows) keep their tiles; their launch bounds leave a
  // thread 255 registers, where ptxas had spilled to stay at 128 (dQ), 168 (d68) and 80 (d20).
  const Plan dq =
      rt::plan_backward(spec_with(59, "none"), "sm_80", {.align_bytes = 2}).launches[2];
  CHECK(dq.tiles == Tiles{128, 64, 8, 2});
  CHECK(emit_source(dq).find("__launch_bounds__(256, 1)") != std::string::npos);
  check_compiles_clean(dq);
  for (const auto& [dim, target] : {std::pair{68, "sm_90a"}, std::pair{20, "sm_80"}}) {
    const Spec spec = spec_with(dim, "none");
    const Plan split = rt::plan_decode(spec, target, {.align_bytes = 8, .tma_loadable = false},
                                       dec_sm80_tiles(spec, target, 32))
                           .launches[0];
    check_compiles_clean(split);
  }
  // 16-byte rows leave the kernels' own bounds.
  const Plan aligned = rt::plan_backward(spec_with(64, "none"), "sm_80", {}).launches[2];
  CHECK(emit_source(aligned).find("__launch_bounds__(256)") != std::string::npos);
}

TEST_CASE("heuristic: the sm80 forward's launch bounds name the CTAs shared memory allows "
          "where they leave a thread 255 registers") {
  CHECK(resident_ctas("sm_80", 57344, 128) == 2);
  CHECK(resident_ctas("sm_90a", 57344, 128) == 4);
  CHECK(resident_ctas("sm_86", 111616, 128) == 1);  // at least one, even past the SM's
  CHECK(resident_ctas("sm_90a", 0, 256) == 8);       // threads bound it
  const auto entry_bounds = [](const char* yaml, const char* target) {
    const std::string source = emit_source(make_plan(Spec::from_yaml(yaml), target));
    const size_t at = source.find("__launch_bounds__(");
    return source.substr(at, source.find(')', at) - at + 1);
  };
  // Two CTAs of 128 threads on sm_80: 255 registers each still fit.
  CHECK(entry_bounds("head_dim: 33\ncausal: true\n", "sm_80") == "__launch_bounds__(128, 2)");
  // Four on sm_90a would cap a thread at 128: ptxas's own aim stands.
  CHECK(entry_bounds("head_dim: 33\ncausal: true\nhopper: {warp_specialization: false}\n",
                     "sm_90a") == "__launch_bounds__(128)");
}

}  // namespace flashjit::gen
