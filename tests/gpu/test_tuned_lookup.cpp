// The runtime's tune DB lookup on the GPU: an entry for this GPU, spec and shape bucket picks
// the kernel's tiles (and the output stays correct); an entry of another GPU, another bucket
// or a corrupt DB leaves the heuristic in charge without failing the call.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "autotune/candidates.h"
#include "generator/fwd_sm90_path.h"
#include "generator/plan.h"
#include "runtime/tune_db.h"
#include "runtime/tune_key.h"
#include "tests/cpu/runtime_test_support.h"
#include "tests/gpu/gpu_runtime.h"
#include "verify/attention_run.h"

namespace flashjit::gpu_test {
namespace {

Spec tuned_spec() {
  Spec s;
  s.name = "tuned_lookup_hd64";
  s.head_dim_qk = s.head_dim_v = 64;
  s.dtype = DType::BF16;
  s.causal = true;
  return s;
}

// Valid tiles, other than the heuristic's, of the kernel that serves tuned_spec() on
// `target`; the test REQUIREs that they differ, so a later heuristic change cannot make it
// pass vacuously.
Tiles tuned_tiles(const std::string& target) {
  const bool sm90 = gen::choose_path(gen::Step::Forward, tuned_spec(), target).id ==
                    gen::KernelPath::FwdSm90;
  return sm90 ? Tiles{128, 96, 12, 3} : Tiles{64, 64, 4, 2};
}

verify::Shape shape_of(int seqlen) {
  verify::Shape shape;
  shape.batch = 2;
  shape.heads_q = shape.heads_kv = 4;
  shape.seqlen_q = shape.seqlen_k = seqlen;
  return shape;
}

tune::TuneEntry entry_for(const tune::GpuIdentity& gpu, const verify::Shape& shape) {
  const DeviceInfo info = gpu_runtime().device();
  tune::TuneEntry e;
  e.gpu = gpu;
  e.spec_hash = tune::spec_hash(tuned_spec());
  e.spec_summary = tune::spec_summary(tuned_spec());
  e.bucket = tune::bucket_for(shape.seqlen_q, shape.seqlen_k, shape.batch, shape.heads_q);
  e.target = gen::target_for_device(info.cc_major, info.cc_minor);
  e.tiles = tuned_tiles(e.target);
  e.heuristic_tiles = gen::default_tiles(tuned_spec(), e.target);
  return e;
}

// Runs the spec through a fresh Kernel (Runtime::kernel reads the DB at the first launch of
// each bucket), checks it against the fp64 reference and returns the tiles of the variant it
// launched, read from the kernel's report (run_attention names the last variant reported).
Tiles run_and_get_tiles(const verify::Shape& shape) {
  verify::RunOptions options;
  options.iters = 0;
  const verify::RunResult r = verify::run_attention(gpu_runtime(), tuned_spec(), shape, options);
  INFO(r.kernel, ": ", r.failure);
  CHECK(r.passed);
  Tiles t;
  if (const auto ws = r.kernel.rfind("_ws_n"); ws != std::string::npos) {  // sm90: m128, 12 warps
    t.block_m = gen::kSm90BlockM;
    t.warps = gen::kSm90Warps;
    REQUIRE(std::sscanf(r.kernel.c_str() + ws, "_ws_n%ds%d", &t.block_n, &t.stages) == 2);
    return t;
  }
  const auto at = r.kernel.rfind("_m");
  REQUIRE(at != std::string::npos);
  REQUIRE(std::sscanf(r.kernel.c_str() + at, "_m%dn%dw%ds%d", &t.block_m, &t.block_n, &t.warps,
                      &t.stages) == 4);
  return t;
}

}  // namespace

TEST_CASE("tuned lookup: the DB entry for this GPU, spec and bucket picks the tiles") {
  const test::TempDir dir;
  const std::string db_path = (dir.path() / "tune.json").string();
  const test::ScopedEnv db_env("FLASHJIT_TUNE_DB", db_path);
  const tune::GpuIdentity gpu = tune::gpu_identity(gpu_runtime().device());
  const std::string target = gen::target_for_device(gpu.cc_major, gpu.cc_minor);
  const Tiles heuristic = gen::default_tiles(tuned_spec(), target);
  const Tiles tuned = tuned_tiles(target);
  REQUIRE_FALSE(heuristic == tuned);

  const verify::Shape shape = shape_of(300);  // bucket q512 k512 bh8
  tune::TuneDb(db_path).record({entry_for(gpu, shape)});
  CHECK(run_and_get_tiles(shape) == tuned);
  // Another bucket of the same spec has no entry: the heuristic serves it.
  CHECK(run_and_get_tiles(shape_of(1000)) == heuristic);

}

TEST_CASE("tuned lookup: an entry of another driver is ignored; a corrupt DB is a miss") {
  const test::TempDir dir;
  const std::string db_path = (dir.path() / "tune.json").string();
  const test::ScopedEnv db_env("FLASHJIT_TUNE_DB", db_path);
  tune::GpuIdentity other = tune::gpu_identity(gpu_runtime().device());
  other.driver_version += 10;
  const std::string target = gen::target_for_device(other.cc_major, other.cc_minor);
  const Tiles heuristic = gen::default_tiles(tuned_spec(), target);
  const verify::Shape shape = shape_of(300);
  tune::TuneDb(db_path).record({entry_for(other, shape)});
  CHECK(run_and_get_tiles(shape) == heuristic);

  std::ofstream(db_path) << "{ not json";
  CHECK(run_and_get_tiles(shape) == heuristic);
}

}  // namespace flashjit::gpu_test
