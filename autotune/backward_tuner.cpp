#include "autotune/backward_tuner.h"

#include <algorithm>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "autotune/backward_inputs.h"
#include "autotune/candidate_loop.h"
#include "autotune/candidates.h"
#include "autotune/compile_pool.h"
#include "runtime/call_traits.h"
#include "runtime/kernel_compiler.h"
#include "runtime/operation.h"
#include "verify/backward_run.h"

namespace flashjit::tune {
namespace {

// The tile source of the tuner's runtime: no tiles for the forward (the heuristic's gives O
// and LSE; the candidates do not change it) and the candidate's for the backward, per bucket
// where given. A kernel asks once a bucket, so each candidate gets a kernel of its own, made
// after use(); one thread tunes, so no lock.
class CandidateTiles final : public TileSource {
 public:
  void use(const BackwardTiles& tiles, std::map<ShapeBucket, BackwardTiles> by_bucket = {}) {
    tiles_ = tiles;
    by_bucket_ = std::move(by_bucket);
  }

  std::optional<Tiles> tiles(const Query&, std::string& why) const override {
    why = "the backward's tuning runs the forward's heuristic";
    return std::nullopt;
  }

  std::optional<BackwardTiles> backward_tiles(const Query& q, std::string& why) const override {
    why = "a candidate of `flashjit tune --backward`";
    const auto found = by_bucket_.find(bucket_for(q.seqlen_q, q.seqlen_k, q.batch, q.heads_q));
    return found != by_bucket_.end() ? found->second : tiles_;
  }

 private:
  BackwardTiles tiles_;
  std::map<ShapeBucket, BackwardTiles> by_bucket_;
};

// The traits of the timed calls: every shape's tensors are contiguous with the same head dims,
// and device allocations are 256-byte aligned, so the strides alone decide them.
gen::CallTraits timed_call(const Spec& spec, const TimedShape& shape) {
  const CallShape c = call_shape(shape);
  return rt::backward_call_traits(
      spec, backward_args_of(ForwardArgs::contiguous(spec, c.batch, c.heads_q, c.heads_kv,
                                                     c.seqlen_q, c.seqlen_k)));
}

// Tuned tiles serve the spec's primary paths only (gen::make_plan): timing calls that take
// another would tune nothing the runtime uses.
void require_primary_paths(const Spec& spec, const std::string& target,
                           const gen::CallTraits& call, const BackwardCandidateSpace& space) {
  for (const gen::KernelPathInfo* primary : {space.dkdv_path, space.dq_path}) {
    const gen::KernelPathInfo& taken = gen::choose_path(primary->step, spec, target, call);
    if (&taken != primary)
      throw Error(ErrorKind::Usage,
                  fmt::format("spec {}: on {} the backward of packed tensors ({}-byte aligned "
                              "rows{}) runs the {} kernel, not {}, the one whose tiles the tune "
                              "DB holds: nothing to tune",
                              spec.name, target, call.align_bytes,
                              call.tma_loadable ? "" : ", which TMA cannot load", taken.name,
                              primary->name));
  }
}

std::string candidate_name(const BackwardCandidateSpace& space, size_t i) {
  const BackwardTiles& t = space.candidates[i];
  if (i == 0) return "heuristic " + rt::backward_tiles_label(t);
  return i < space.first_dq ? "dK/dV " + tiles_label(t.dkdv) : "dQ " + tiles_label(t.dq);
}

// One bucket's inputs and what was measured on them.
struct BucketBench {
  BucketResult<BackwardTiles> result;
  BackwardTimedInputs inputs;
};

}  // namespace

BackwardTuneResult tune_backward(int device, const Spec& spec, const TuneOptions& options,
                                 const Progress& progress) {
  const TuningClock clock;
  const auto source = std::make_shared<CandidateTiles>();
  Runtime runtime({.device = device, .tile_source = source});
  BackwardTuneResult out;
  out.spec = spec;
  const TuningSetup setup = tuning_setup(runtime, spec, options);
  out.target = setup.target;
  const BackwardCandidateSpace space = backward_candidate_space(spec, setup.target);
  const gen::CallTraits call = timed_call(spec, setup.shapes.front());
  require_primary_paths(spec, setup.target, call, space);
  const size_t n = space.candidates.size();
  out.candidates = static_cast<int>(n);
  out.pruned = static_cast<int>(space.pruned.size());
  progress(fmt::format("{} ({}) on {}: backward {} and {}: {} candidates, {} pruned before "
                       "compiling",
                       spec.name, spec_summary(spec), setup.target, space.dkdv_path->name,
                       space.dq_path->name, out.candidates, out.pruned));
  for (const PrunedTiles& p : space.pruned)
    progress(fmt::format("  pruned {} {}: {}", gen::to_string(p.step), tiles_label(p.tiles),
                         p.reason));

  // Compiled here into the disk cache, which the candidates' kernels then load from; each
  // candidate reports the kernels it adds to the heuristic's.
  rt::KernelCompiler own(rt::DiskCache::from_env());
  std::vector<std::string> heuristic_kernels;
  for (const gen::Plan& plan :
       rt::plan_backward(spec, setup.target, call, &space.candidates[0]).launches)
    heuristic_kernels.push_back(plan.kernel_name);
  // Its threads read only what was made before it, which outlives them.
  CompilePool compiles(
      n,
      [&](size_t i) {
        std::vector<CompileReport> added;
        for (const gen::Plan& plan :
             rt::plan_backward(spec, setup.target, call, &space.candidates[i]).launches) {
          const CompileReport report = own.compile(plan)->report;
          if (i == 0 || std::find(heuristic_kernels.begin(), heuristic_kernels.end(),
                                  plan.kernel_name) == heuristic_kernels.end())
            added.push_back(report);
        }
        return added;
      },
      compile_threads(options.compile_threads));

  // Inputs, prepared while the first candidates compile.
  const std::vector<uint16_t> pool = pool_for(spec, setup.shapes);
  const std::shared_ptr<Kernel> forward = runtime.kernel(spec);
  std::vector<BucketBench> benches;
  for (const TimedShape& s : setup.shapes) {
    BucketBench& bench = benches.emplace_back();
    bench.result.shape = s;
    bench.result.bucket = bucket_of(s);
    bench.inputs = make_backward_inputs(*forward, spec, call_shape(s), pool);
  }

  const TimingOptions& timing = options.timing;
  CandidateSteps steps;
  steps.spec_name = spec.name;
  steps.label = [&](size_t i) { return candidate_name(space, i); };
  steps.reference_check = [&](size_t i) {
    source->use(space.candidates[i]);
    verify::BackwardRunOptions check;
    check.run.iters = 0;
    check.run.seed = kSeed;
    const verify::BackwardRunResult small =
        verify::run_backward(runtime, spec, check_shape(), check);
    return ReferenceCheck{small.kernels, small.failure};
  };
  steps.measure = [&](size_t i, const std::string& line) {
    // A dQ tiling runs beside each bucket's fastest dK/dV tiles so far.
    const BackwardTiles& candidate = space.candidates[i];
    std::map<ShapeBucket, BackwardTiles> by_bucket;
    for (const BucketBench& bench : benches)
      by_bucket[bench.result.bucket] =
          i < space.first_dq ? candidate
                             : BackwardTiles{bench.result.tiles.best.dkdv, candidate.dq};
    source->use(candidate, by_bucket);
    const std::shared_ptr<Kernel> kernel = runtime.kernel(spec);
    for (BucketBench& bench : benches) {
      BucketResult<BackwardTiles>& r = bench.result;
      progress(fmt::format("{} {}: {}", line, describe(r.bucket),
                           r.tiles.measure(*kernel, bench.inputs, spec.dtype, by_bucket[r.bucket],
                                           i == 0, timing)));
    }
  };
  const LoopOutcome loop = run_candidates(n, compiles, steps, timing, clock, progress);
  out.dropped = loop.dropped;
  out.budget_exhausted = loop.budget_exhausted;

  for (BucketBench& bench : benches) {
    add_settled(out, setup, bench.result, timing);
    out.entries.back().dkdv_path = space.dkdv_path->name;
    out.entries.back().dq_path = space.dq_path->name;
  }
  out.seconds = clock.seconds();
  return out;
}

}  // namespace flashjit::tune
