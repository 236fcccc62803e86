#include "autotune/tuner.h"

#include <fmt/format.h>

#include "autotune/candidate_loop.h"
#include "autotune/candidates.h"
#include "autotune/compile_pool.h"
#include "generator/plan.h"
#include "runtime/call_traits.h"
#include "runtime/kernel_compiler.h"
#include "verify/attention_run.h"

namespace flashjit::tune {
namespace {

Spec with_tiles(const Spec& spec, const Tiles& tiles) {
  Spec s = spec;
  s.tiles = tiles;
  return s;
}

// One bucket's inputs and what was measured on them.
struct BucketBench {
  BucketResult<Tiles> result;
  TimedInputs inputs;
};

}  // namespace

SpecTuneResult tune_spec(Runtime& runtime, const Spec& spec, const TuneOptions& options,
                         const Progress& progress) {
  const TuningClock clock;
  SpecTuneResult out;
  out.spec = spec;
  const TuningSetup setup = tuning_setup(runtime, spec, options);
  out.target = setup.target;
  const CandidateSpace space = candidate_space(spec, setup.target);
  out.candidates = static_cast<int>(space.candidates.size());
  out.pruned = static_cast<int>(space.pruned.size());
  progress(fmt::format("{} ({}) on {}: {} candidates, {} pruned before compiling", spec.name,
                       spec_summary(spec), setup.target, out.candidates, out.pruned));
  for (const PrunedTiles& p : space.pruned)
    progress(fmt::format("  pruned {}: {}", tiles_label(p.tiles), p.reason));

  // Every bucket's tensors are contiguous with the same head dims, and device allocations are
  // 256-byte aligned: the strides alone decide the one alignment all buckets need.
  const CallShape first = call_shape(setup.shapes.front());
  const int align_bytes = rt::forward_alignment(spec, ForwardArgs::contiguous(
      spec, first.batch, first.heads_q, first.heads_kv, first.seqlen_q, first.seqlen_k));
  // 16-byte aligned variants go through Runtime::compile, whose in-memory cache the kernels it
  // hands out share; other alignments (head dims whose rows are not 16-byte multiples)
  // Runtime::compile does not build, so they go through a compiler of our own that writes the
  // disk cache the kernels' first launch then reads.
  rt::KernelCompiler own(rt::DiskCache::from_env());
  // Its threads read only what was made before it, which outlives them.
  CompilePool compiles(
      space.candidates.size(),
      [&](size_t i) -> std::vector<CompileReport> {
        const Spec candidate = with_tiles(spec, space.candidates[i]);
        if (align_bytes == 16) return {runtime.compile(candidate, setup.target)};
        return {own.compile(gen::make_plan(candidate, setup.target, {.align_bytes = align_bytes}))
                    ->report};
      },
      compile_threads(options.compile_threads));

  // Inputs, prepared while the first candidates compile.
  const std::vector<uint16_t> pool = pool_for(spec, setup.shapes);
  std::vector<BucketBench> benches;
  for (const TimedShape& s : setup.shapes) {
    BucketBench& bench = benches.emplace_back();
    bench.result.shape = s;
    bench.result.bucket = bucket_of(s);
    bench.inputs = make_timed_inputs(spec, call_shape(s), pool);
  }

  const TimingOptions& timing = options.timing;
  CandidateSteps steps;
  steps.spec_name = spec.name;
  steps.label = [&](size_t i) { return tiles_label(space.candidates[i]); };
  steps.reference_check = [&](size_t i) {
    verify::RunOptions check;
    check.iters = 0;
    check.seed = kSeed;
    const verify::RunResult small = verify::run_attention(
        runtime, with_tiles(spec, space.candidates[i]), check_shape(), check);
    return ReferenceCheck{small.kernel, small.failure};
  };
  steps.measure = [&](size_t i, const std::string& line) {
    const Tiles& tiles = space.candidates[i];
    const std::shared_ptr<Kernel> kernel = runtime.kernel(with_tiles(spec, tiles));
    for (BucketBench& bench : benches)
      progress(fmt::format(
          "{} {}: {}", line, describe(bench.result.bucket),
          bench.result.tiles.measure(*kernel, bench.inputs, spec.dtype, tiles, i == 0, timing)));
  };
  const LoopOutcome loop =
      run_candidates(space.candidates.size(), compiles, steps, timing, clock, progress);
  out.dropped = loop.dropped;
  out.budget_exhausted = loop.budget_exhausted;

  for (BucketBench& bench : benches) add_settled(out, setup, bench.result, timing);
  out.seconds = clock.seconds();
  return out;
}

}  // namespace flashjit::tune
