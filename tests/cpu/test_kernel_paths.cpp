// The kernel-path registry: every path is found by its id, its descriptor is complete, the
// operations without a path say so, and each path's tile rules and resource budget agree with
// what NVRTC and ptxas make of the kernels at the edge of those rules.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "flashjit/flashjit.h"
#include "generator/fwd_sm80_path.h"
#include "generator/fwd_sm90_path.h"
#include "generator/kernel_path.h"
#include "generator/plan.h"
#include "generator/templates.h"
#include "runtime/kernel_compiler.h"
#include "runtime/operation.h"
#include "tests/cpu/runtime_test_support.h"

namespace flashjit::gen {
namespace {

using test::spec_of;

// The report of `plan` compiled by NVRTC without any cache.
CompileReport compile(const Plan& plan) {
  test::ScopedEnv no_cache("FLASHJIT_DISABLE_CACHE", "1");
  static const rt::BundleRegistry no_bundles;
  rt::KernelCompiler compiler(rt::DiskCache::from_env(), no_bundles);
  return compiler.compile(plan)->report;
}

// ptxas' view of a plan's kernel agrees with the registry's: the shared memory the path
// computed, the threads the launch bounds allow, nothing spilled.
void check_against_ptxas(const Plan& plan) {
  CAPTURE(plan.kernel_name);
  const CompileReport report = compile(plan);
  CHECK(report.shared_bytes == plan.shared_bytes);
  CHECK(report.registers * plan.threads <= 65536);
  CHECK(report.spill_store_bytes == 0);
  CHECK(report.spill_load_bytes == 0);
}

}  // namespace

TEST_CASE("registry: every path is complete, named once and found by its id") {
  std::set<std::string> names;
  for (const KernelPathInfo* path : kernel_paths()) {
    CAPTURE(path->name);
    CHECK(names.insert(path->name).second);
    CHECK(&kernel_path(path->id) == path);
    CHECK(std::string(to_string(path->id)) == path->label);
    const bool complete = path->layout && path->serves && path->default_tiles && path->tiles_problem &&
                          path->shared_bytes && path->tuning_grid && path->tuning_problem &&
                          path->tiles_label && path->extra_source && path->entry;
    CHECK(complete);
    CHECK_NOTHROW(template_text(path->template_file));
  }
  CHECK(names == std::set<std::string>{"fwd_sm80", "fwd_sm90", "bwd_pre", "bwd_dkdv_dq_sm90",
                                       "bwd_dkdv_dq_ordered_sm90", "bwd_dkdv_paired_sm90",
                                       "bwd_dkdv_sm90", "bwd_dkdv_sm80", "bwd_dq_convert", "bwd_dq_sm90",
                                       "bwd_dq_paired_sm90", "bwd_dq_sm80", "dec_sm80",
                                       "dec_combine", "merge"});
}

TEST_CASE("registry: the first path that serves a call is chosen, in the order of preference") {
  const Spec s = spec_of(128, 128);
  CHECK(choose_path(Step::Forward, s, "sm_90a").id == KernelPath::FwdSm90);
  CHECK(choose_path(Step::Forward, s, "sm_90a", {.align_bytes = 8, .tma_loadable = false})
            .id == KernelPath::FwdSm80);
  CHECK(choose_path(Step::Forward, s, "sm_80").id == KernelPath::FwdSm80);
  CHECK_THROWS_AS(choose_path(Step::Forward, s, "sm_70"), Error);
  CHECK(choose_path(Step::BwdDkDv, s, "sm_90a").id == KernelPath::BwdDkDvDqSm90);
  Spec deterministic = s;
  deterministic.deterministic = true;
  CHECK(choose_path(Step::BwdDkDv, deterministic, "sm_90a").id ==
        KernelPath::BwdDkDvDqOrderedSm90);
  CHECK(choose_path(Step::BwdDq, deterministic, "sm_90a").id == KernelPath::BwdDqConvert);
  // Past d128 the dQ variants' registers would split dK/dV's columns: the two kernels.
  Spec d136 = spec_of(136, 136);
  d136.deterministic = true;
  CHECK(choose_path(Step::BwdDkDv, d136, "sm_90a").id == KernelPath::BwdDkDvSm90);
  CHECK(choose_path(Step::BwdDq, d136, "sm_90a").id == KernelPath::BwdDqSm90);
  // Where that kernel would split the columns, its consumers pair on 64 keys instead.
  Spec d256 = spec_of(256, 256);
  d256.deterministic = true;
  CHECK(choose_path(Step::BwdDkDv, d256, "sm_90a").id == KernelPath::BwdDkDvPairedSm90);
  CHECK(choose_path(Step::BwdDq, d256, "sm_90a").id == KernelPath::BwdDqSm90);
  CHECK(choose_path(Step::BwdDkDv, s, "sm_90a", {.tma_loadable = false}).id ==
        KernelPath::BwdDkDvSm80);
  CHECK(choose_path(Step::BwdDkDv, s, "sm_80").id == KernelPath::BwdDkDvSm80);
  CHECK(choose_path(Step::BwdDkDv, spec_of(320, 320), "sm_90a").id ==
        KernelPath::BwdDkDvPairedSm90);
  CHECK(choose_path(Step::BwdDkDv, spec_of(128, 512), "sm_90a").id ==
        KernelPath::BwdDkDvPairedSm90);
  CHECK(choose_path(Step::BwdDkDv, spec_of(512, 512), "sm_90a").id ==
        KernelPath::BwdDkDvPairedSm90);
  // dQ: 128 rows a CTA up to d320, past it 64 with the consumers paired.
  CHECK(choose_path(Step::BwdDq, spec_of(320, 320), "sm_90a").id == KernelPath::BwdDqSm90);
  CHECK(choose_path(Step::BwdDq, spec_of(512, 512), "sm_90a").id == KernelPath::BwdDqPairedSm90);
  CHECK(choose_path(Step::BwdDq, spec_of(512, 512), "sm_90a", {.tma_loadable = false}).id ==
        KernelPath::BwdDqSm80);
  CHECK(choose_path(Step::BwdDq, s, "sm_86").id == KernelPath::BwdDqSm80);
  CHECK(choose_path(Step::BwdDq, s, "sm_90a").id == KernelPath::BwdDqConvert);
  CHECK(choose_path(Step::BwdDq, s, "sm_90a", {.tma_loadable = false}).id ==
        KernelPath::BwdDqSm80);
}

TEST_CASE("registry: a step no path serves is a clear usage error") {
  try {
    choose_path(Step::BwdDq, spec_of(64, 64), "sm_70");
    FAIL("no error");
  } catch (const Error& error) {
    CHECK(error.kind() == ErrorKind::Usage);
  }
}

TEST_CASE("registry: the forward is one launch, the backward three") {
  const rt::OperationPlan op = rt::plan_forward(spec_of(100, 100), "sm_90a", {}, nullptr);
  REQUIRE(op.launches.size() == 1);
  CHECK(op.launches[0].path->id == KernelPath::FwdSm90);
  const rt::OperationPlan bwd = rt::plan_backward(spec_of(100, 72), "sm_90a", {});
  REQUIRE(bwd.launches.size() == 3);
  CHECK(bwd.launches[0].path->id == KernelPath::BwdPre);
  CHECK(bwd.launches[1].path->id == KernelPath::BwdDkDvDqSm90);
  CHECK(bwd.launches[2].path->id == KernelPath::BwdDqConvert);
  CHECK(bwd.launches[1].kernel_name.starts_with("fa_bwd_dkdvdq_qk100_v72_"));
  const std::vector<rt::ScratchBuffer> scratch = {{"a", 1}, {"b", 300}};
  CHECK(rt::workspace_bytes(scratch) == 256 + 512);
  char base[1024];
  const std::vector<void*> at = rt::scratch_pointers(scratch, base);
  REQUIRE(at.size() == 2);
  CHECK(at[0] == base);
  CHECK(at[1] == base + 256);
}

TEST_CASE("registry: every path's default tiles pass its own rules for head dims 1..512") {
  for (const KernelPathInfo* path : kernel_paths())
    for (const std::string target : {"sm_80", "sm_86", "sm_90a"})
      for (int d = 1; d <= 512; d += 37) {
        const Spec s = spec_of(d, 512 + 1 - d);
        if (!path->serves(s, target, {})) continue;
        CAPTURE(path->name);
        CAPTURE(target);
        CAPTURE(d);
        const Tiles tiles = path->default_tiles(s, target, {});
        CHECK(tiles_problem(s, target, tiles, *path) == "");
        CHECK(path->shared_bytes(padded_dims(s), tiles) <= max_shared_bytes(target));
      }
}

TEST_CASE("registry: the sm90 budgets hold at their edge: the widest accepted tiles compile "
          "without spills, with ptxas' shared memory") {
  for (const Spec& s : {spec_of(64, 64), spec_of(256, 256), spec_of(192, 128)}) {
    const PaddedDims dims = padded_dims(s);
    // The widest key block the register and shared-memory budgets accept with two stages.
    Tiles widest{kSm90BlockM, 16, kSm90Warps, 2};
    for (int n = 16; n <= 256; n += 16) {
      const Tiles t{kSm90BlockM, n, kSm90Warps, 2};
      if (sm90_tiles_problem(dims, t, "sm_90a").empty()) widest = t;
    }
    CAPTURE(s.head_dim_qk);
    CAPTURE(widest.block_n);
    check_against_ptxas(make_plan(s, "sm_90a", {}, &widest));
  }
}

TEST_CASE("registry: the sm80 budget holds at its edge: the largest accepted tiles compile "
          "without spills, the smallest refused ones spill") {
  const Tiles m128n64w4{128, 64, 4, 2};
  const Spec accepted = spec_of(96, 96), refused = spec_of(112, 112);
  REQUIRE(sm80_accumulator_registers(padded_dims(accepted).dv_slice, m128n64w4) == 192);
  REQUIRE(sm80_accumulator_registers(padded_dims(refused).dv_slice, m128n64w4) == 208);
  CHECK(kFwdSm80Path.tuning_problem(padded_dims(accepted), m128n64w4) == "");
  CHECK(kFwdSm80Path.tuning_problem(padded_dims(refused), m128n64w4) != "");
  check_against_ptxas(make_plan(accepted, "sm_80", {}, &m128n64w4));
  const CompileReport spilled = compile(make_plan(refused, "sm_80", {}, &m128n64w4));
  CHECK(spilled.spill_store_bytes > 0);
}

}  // namespace flashjit::gen
