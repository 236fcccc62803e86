// The backward's tuned tiles on the GPU: a tune DB backward entry for this GPU, spec and shape
// bucket picks the dK/dV and dQ kernels (and the gradients still pass the fp64 reference
// check), a tile source's backward tiles that cannot run are ignored, and `flashjit tune
// --backward`'s tuner, on a small spec with a small budget, records entries the runtime then
// follows.
#include <doctest/doctest.h>

#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "autotune/backward_inputs.h"
#include "autotune/backward_tuner.h"
#include "autotune/candidates.h"
#include "generator/targets.h"
#include "runtime/call_traits.h"
#include "runtime/operation.h"
#include "runtime/tune_db.h"
#include "runtime/tune_key.h"
#include "tests/cpu/runtime_test_support.h"
#include "tests/gpu/gpu_runtime.h"
#include "verify/backward_run.h"

namespace flashjit::gpu_test {
namespace {

// Deterministic at d136, so that on sm_90a both steps take kernels with tuning grids (up to
// d128 the deterministic backward is the ordered dK/dV/dQ kernel and dQ's conversion, which
// tunes nothing).
Spec tuned_spec() {
  Spec s;
  s.name = "tuned_backward_hd136";
  s.head_dim_qk = s.head_dim_v = 136;
  s.dtype = DType::BF16;
  s.causal = true;
  s.deterministic = true;
  return s;
}

std::string this_target() {
  const DeviceInfo info = gpu_runtime().device();
  return gen::target_for_device(info.cc_major, info.cc_minor);
}

verify::Shape shape_of(int seqlen) {
  verify::Shape shape;
  shape.batch = 2;
  shape.heads_q = 4;
  shape.heads_kv = 2;
  shape.seqlen_q = shape.seqlen_k = seqlen;
  return shape;
}

// Tiles of both steps other than the heuristic's, from the tuner's own space.
BackwardTiles other_tiles(const std::string& target) {
  const tune::BackwardCandidateSpace space = tune::backward_candidate_space(tuned_spec(), target);
  REQUIRE(space.candidates.size() > space.first_dq);
  REQUIRE(space.first_dq > 1);
  return {space.candidates[1].dkdv, space.candidates[space.first_dq].dq};
}

// The kernel names of the backward's launches with `tiles` (auto: the heuristic's) for the
// packed tensors run_backward makes.
std::vector<std::string> kernels_for(const BackwardTiles& tiles, const verify::Shape& shape) {
  const BackwardArgs args = tune::backward_args_of(ForwardArgs::contiguous(
      tuned_spec(), shape.batch, shape.heads_q, shape.heads_kv, shape.seqlen_q, shape.seqlen_k));
  std::vector<std::string> names;
  for (const gen::Plan& plan :
       rt::plan_backward(tuned_spec(), this_target(),
                         rt::backward_call_traits(tuned_spec(), args), &tiles)
           .launches)
    names.push_back(plan.kernel_name);
  return names;
}

// Runs the backward of tuned_spec() through a fresh kernel of `runtime`, checks it against the
// fp64 reference and returns the names of the kernels it loaded.
std::string run_checked(Runtime& runtime, const verify::Shape& shape) {
  verify::BackwardRunOptions options;
  options.run.iters = 0;
  const verify::BackwardRunResult r = verify::run_backward(runtime, tuned_spec(), shape, options);
  fmt::print("{} b{} h{}/{} q{} k{} | {} | {}\n", tuned_spec().name, shape.batch, shape.heads_q,
             shape.heads_kv, shape.seqlen_q, shape.seqlen_k, r.kernels,
             r.passed ? "ok" : "FAIL: " + r.failure);
  std::fflush(stdout);
  INFO(r.kernels, ": ", r.failure);
  CHECK(r.passed);
  return r.kernels;
}

void check_ran(const std::string& loaded, const BackwardTiles& tiles, const verify::Shape& shape) {
  for (const std::string& name : kernels_for(tiles, shape))
    CHECK_MESSAGE(loaded.find(name) != std::string::npos, name, " not in: ", loaded);
}

tune::BackwardEntry entry_for(const tune::GpuIdentity& gpu, const verify::Shape& shape,
                              const BackwardTiles& tiles) {
  const std::string target = this_target();
  tune::BackwardEntry e;
  e.gpu = gpu;
  e.spec_hash = tune::spec_hash(tuned_spec());
  e.spec_summary = tune::spec_summary(tuned_spec());
  e.bucket = tune::bucket_for(shape.seqlen_q, shape.seqlen_k, shape.batch, shape.heads_q);
  e.target = target;
  e.dkdv_path = gen::choose_path(gen::Step::BwdDkDv, tuned_spec(), target).name;
  e.dq_path = gen::choose_path(gen::Step::BwdDq, tuned_spec(), target).name;
  e.tiles = tiles;
  return e;
}

// A tile source with fixed backward tiles (and none for the forward).
class FixedBackwardTiles final : public TileSource {
 public:
  explicit FixedBackwardTiles(BackwardTiles tiles) : tiles_(tiles) {}
  std::optional<Tiles> tiles(const Query&, std::string& why) const override {
    why = "a test's source";
    return std::nullopt;
  }
  std::optional<BackwardTiles> backward_tiles(const Query&, std::string& why) const override {
    why = "a test's source";
    return tiles_;
  }

 private:
  BackwardTiles tiles_;
};

}  // namespace

TEST_CASE("tuned backward: the DB entry for this GPU, spec and bucket picks the backward's tiles") {
  const test::TempDir dir;
  const std::string db_path = (dir.path() / "tune.json").string();
  const test::ScopedEnv db_env("FLASHJIT_TUNE_DB", db_path);
  const tune::GpuIdentity gpu = tune::gpu_identity(gpu_runtime().device());
  const BackwardTiles tuned = other_tiles(this_target());
  const verify::Shape shape = shape_of(300);  // bucket q512 k512 bh8
  tune::TuneDb(db_path).record({entry_for(gpu, shape, tuned)});
  check_ran(run_checked(gpu_runtime(), shape), tuned, shape);
  // Another bucket of the same spec has no entry: the heuristic serves it.
  check_ran(run_checked(gpu_runtime(), shape_of(1000)), BackwardTiles{}, shape_of(1000));

  // An entry of another driver, or one tuned for another path, is ignored.
  tune::GpuIdentity other = gpu;
  other.driver_version += 10;
  tune::BackwardEntry stale = entry_for(gpu, shape, tuned);
  stale.dkdv_path = "bwd_dkdv_dq_sm90";
  tune::TuneDb(db_path).record({entry_for(other, shape, tuned)});
  tune::TuneDb(db_path).record({stale});
  check_ran(run_checked(gpu_runtime(), shape), BackwardTiles{}, shape);
}

TEST_CASE("tuned backward: a tile source's backward tiles reach the launches; ones that cannot "
          "run are ignored") {
  const verify::Shape shape = shape_of(300);
  const BackwardTiles tuned = other_tiles(this_target());
  Runtime given({.tile_source = std::make_shared<FixedBackwardTiles>(tuned)});
  check_ran(run_checked(given, shape), tuned, shape);

  BackwardTiles impossible = tuned;
  impossible.dkdv.warps += 1;
  Runtime refused({.tile_source = std::make_shared<FixedBackwardTiles>(impossible)});
  check_ran(run_checked(refused, shape), BackwardTiles{}, shape);
}

TEST_CASE("tuned backward: the tuner records an entry a bucket, and the runtime then runs its "
          "tiles") {
  const test::TempDir dir;
  const std::string db_path = (dir.path() / "tune.json").string();
  const test::ScopedEnv db_env("FLASHJIT_TUNE_DB", db_path);
  tune::TuneOptions options;
  options.seqlens = {512};
  options.batch_heads = 8;  // batch 1 x 8 heads: bucket q512 k512 bh8
  options.timing.budget_s = 20;
  options.timing.warmup = 1;
  options.timing.iters = 5;
  const tune::BackwardTuneResult result =
      tune::tune_backward(0, tuned_spec(), options, [](const std::string& line) {
        fmt::print("  {}\n", line);
        std::fflush(stdout);
      });
  REQUIRE(result.entries.size() == 1);
  const tune::BackwardEntry& e = result.entries[0];
  CHECK(e.bucket == tune::ShapeBucket{512, 512, 8});
  CHECK(e.tuned_ms > 0);
  CHECK(e.tuned_ms <= e.heuristic_ms);
  CHECK(e.heuristic_tiles ==
        tune::backward_candidate_space(tuned_spec(), this_target()).candidates.front());
  for (const std::string& why : result.dropped) fmt::print("  dropped {}\n", why);
  tune::TuneDb(db_path).record(result.entries);
  fmt::print("tuned {} against the heuristic's {}: {:.4f} ms vs {:.4f} ms\n",
             rt::backward_tiles_label(e.tiles), rt::backward_tiles_label(e.heuristic_tiles),
             e.tuned_ms, e.heuristic_ms);

  verify::Shape shape;
  shape.heads_q = shape.heads_kv = 8;
  shape.seqlen_q = shape.seqlen_k = 500;  // the same bucket
  Runtime fresh;  // its kernels read the DB
  check_ran(run_checked(fresh, shape), e.tiles, shape);
}

}  // namespace flashjit::gpu_test
