#include "autotune/tuner.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "autotune/candidates.h"
#include "generator/plan.h"
#include "runtime/call_traits.h"
#include "runtime/driver.h"
#include "runtime/kernel_compiler.h"
#include "verify/attention_run.h"

namespace flashjit::tune {
namespace {

// The benchmark's shapes (bench/shapes.py, the FlashAttention papers).
constexpr int kTokens = 16384;
constexpr int kHidden = 2048;
// The small odd shape every candidate must pass against the fp64 reference: seqlens that are
// no multiple of any tile, seqlen_q < seqlen_k (bottom-right causal), GQA.
verify::Shape check_shape() {
  verify::Shape shape;
  shape.heads_q = 2;
  shape.seqlen_q = 257;
  shape.seqlen_k = 300;
  return shape;
}

Spec with_tiles(const Spec& spec, const Tiles& tiles) {
  Spec s = spec;
  s.tiles = tiles;
  return s;
}

struct CompileOutcome {
  CompileReport report;
  std::string error;  // "" when it compiled
};

// Compiles every candidate on `threads` CPU threads, in order, while the caller times those
// done. 16-byte aligned variants go through Runtime::compile, whose in-memory cache the
// kernels it hands out share; other alignments (head dims whose rows are not 16-byte
// multiples) Runtime::compile does not build, so they go through a compiler of our own that
// writes the disk cache the kernels' first launch then reads. stop() leaves the rest.
class CompilePool {
 public:
  CompilePool(Runtime& runtime, const Spec& spec, const std::string& target, int align_bytes,
              const std::vector<Tiles>& tiles, unsigned threads)
      : promises_(tiles.size()) {
    for (auto& p : promises_) futures_.push_back(p.get_future());
    const auto work = [this, &runtime, spec, target, align_bytes, tiles] {
      for (size_t i = next_++; i < tiles.size() && !stop_; i = next_++) {
        CompileOutcome outcome;
        try {
          const Spec candidate = with_tiles(spec, tiles[i]);
          outcome.report = align_bytes == 16
                               ? runtime.compile(candidate, target)
                               : own_.compile(gen::make_plan(candidate, target,
                                                             {.align_bytes = align_bytes}))
                                     ->report;
        } catch (const std::exception& error) {  // an escaping exception would end the process
          outcome.error = error.what();
        }
        promises_[i].set_value(std::move(outcome));
      }
    };
    for (unsigned t = 0; t < threads; ++t) threads_.emplace_back(work);
  }
  ~CompilePool() { stop(); }  // threads_ (declared last) join first

  CompileOutcome wait(size_t i) { return futures_[i].get(); }
  void stop() { stop_ = true; }

 private:
  std::vector<std::promise<CompileOutcome>> promises_;
  std::vector<std::future<CompileOutcome>> futures_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> stop_{false};
  rt::KernelCompiler own_{rt::DiskCache::from_env()};
  std::vector<std::jthread> threads_;
};

// One bucket's inputs and what was measured on them.
struct BucketBench {
  BucketResult result;
  TimedInputs inputs;
};

BucketBench make_bench(const Spec& spec, const TimedShape& shape,
                       const std::vector<uint16_t>& pool) {
  BucketBench bench;
  bench.result.shape = shape;
  bench.result.bucket = bucket_for(shape.seqlen, shape.seqlen, shape.batch, shape.heads);
  bench.inputs = make_timed_inputs(
      spec, {shape.batch, shape.heads, shape.heads, shape.seqlen, shape.seqlen}, pool);
  return bench;
}

}  // namespace

TimedShape timed_shape(const Spec& spec, int seqlen, const std::optional<int>& batch_heads) {
  if (seqlen < 1) throw Error(ErrorKind::Usage, fmt::format("seqlen {} must be >= 1", seqlen));
  if (batch_heads) {
    if (*batch_heads < 1)
      throw Error(ErrorKind::Usage, fmt::format("--batch-heads {} must be >= 1", *batch_heads));
    return {1, *batch_heads, seqlen};
  }
  return {std::max(1, kTokens / seqlen), std::max(1, kHidden / spec.head_dim_qk), seqlen};
}

SpecTuneResult tune_spec(Runtime& runtime, const Spec& spec, const TuneOptions& options,
                         const Progress& progress) {
  const TuningClock clock;
  SpecTuneResult out;
  out.spec = spec;
  if (!runtime.has_device())
    throw Error(ErrorKind::NoDevice,
                fmt::format("tuning {} needs a GPU: {}", spec.name, rt::Driver::unavailable_reason()));
  const DeviceInfo info = runtime.device();
  out.target = gen::target_for_device(info.cc_major, info.cc_minor);
  const GpuIdentity gpu = gpu_identity(info);
  const CandidateSpace space = candidate_space(spec, out.target);
  out.candidates = static_cast<int>(space.candidates.size());
  out.pruned = static_cast<int>(space.pruned.size());
  progress(fmt::format("{} ({}) on {}: {} candidates, {} pruned before compiling", spec.name,
                       spec_summary(spec), out.target, out.candidates, out.pruned));
  for (const PrunedTiles& p : space.pruned)
    progress(fmt::format("  pruned {}: {}", tiles_label(p.tiles), p.reason));

  const unsigned threads = options.compile_threads
                               ? options.compile_threads
                               : std::max(1u, std::thread::hardware_concurrency());
  if (options.seqlens.empty()) throw Error(ErrorKind::Usage, "no seqlens to tune");
  // Every bucket's tensors are contiguous with the same head dims, and device allocations are
  // 256-byte aligned: the strides alone decide the one alignment all buckets need.
  const TimedShape first = timed_shape(spec, options.seqlens.front(), options.batch_heads);
  const int align_bytes = rt::forward_alignment(spec, ForwardArgs::contiguous(
      spec, first.batch, first.heads, first.heads, first.seqlen, first.seqlen));
  CompilePool compiles(runtime, spec, out.target, align_bytes, space.candidates, threads);

  // Inputs, prepared while the first candidates compile.
  std::vector<TimedShape> shapes;
  size_t largest = 0;
  for (int seqlen : options.seqlens) {
    shapes.push_back(timed_shape(spec, seqlen, options.batch_heads));
    const TimedShape& s = shapes.back();
    largest = std::max(largest, size_t{1} * s.batch * s.heads * s.seqlen *
                                    std::max(spec.head_dim_qk, spec.head_dim_v));
  }
  const std::vector<uint16_t> pool = random_pool(spec.dtype, largest);
  std::vector<BucketBench> benches;
  for (const TimedShape& s : shapes) benches.push_back(make_bench(spec, s, pool));

  const TimingOptions& timing = options.timing;
  const size_t n = space.candidates.size();
  for (size_t i = 0; i < n; ++i) {
    const Tiles tiles = space.candidates[i];
    const std::string label = tiles_label(tiles);
    const bool heuristic = i == 0;
    if (!heuristic && clock.budget_spent(timing)) {
      out.budget_exhausted = true;
      compiles.stop();
      progress(fmt::format("budget of {} s spent: {} candidates left untimed", timing.budget_s,
                           n - i));
      break;
    }
    const CompileOutcome compiled = compiles.wait(i);
    const auto drop = [&](const std::string& why) {
      out.dropped.push_back(fmt::format("{}: {}", label, why));
      progress(fmt::format("[{:2}/{}] {} dropped: {}", i + 1, n, label, why));
    };
    if (!compiled.error.empty()) {
      if (heuristic)
        throw Error(ErrorKind::Compile,
                    fmt::format("the heuristic kernel of {} does not compile: {}", spec.name,
                                compiled.error));
      drop(compiled.error);
      continue;
    }
    const CompileReport& report = compiled.report;
    const int spilled = report.spill_store_bytes + report.spill_load_bytes;
    if (spilled > 0 && !heuristic) {
      drop(fmt::format("spills {} bytes (stores {}, loads {})", spilled, report.spill_store_bytes,
                       report.spill_load_bytes));
      continue;
    }
    progress(fmt::format("[{:2}/{}] {} compiled: {} registers, {} B shared, {:.0f} ms{}", i + 1,
                         n, label, report.registers, report.shared_bytes, report.compile_ms,
                         report.cache_hit ? " (cache hit)" : ""));

    const Spec candidate = with_tiles(spec, tiles);
    verify::RunOptions check;
    check.iters = 0;
    check.seed = kSeed;
    const verify::RunResult small = verify::run_attention(runtime, candidate, check_shape(), check);
    if (!small.passed) {
      if (heuristic)
        throw Error(ErrorKind::Usage,
                    fmt::format("the heuristic kernel {} fails the fp64 reference check: {}",
                                small.kernel, small.failure));
      drop("fails the fp64 reference check: " + small.failure);
      continue;
    }

    const std::shared_ptr<Kernel> kernel = runtime.kernel(candidate);
    for (BucketBench& bench : benches) {
      BucketResult& r = bench.result;
      const std::string where = describe(r.bucket);
      progress(fmt::format(
          "[{:2}/{}] {} {}: {}", i + 1, n, label, where,
          r.tiles.measure(*kernel, bench.inputs, spec.dtype, tiles, heuristic, timing)));
    }
  }

  for (BucketBench& bench : benches) {
    BucketResult& r = bench.result;
    r.tiles.settle(timing);
    TuneEntry e;
    e.gpu = gpu;
    e.spec_hash = spec_hash(spec);
    e.spec_summary = spec_summary(spec);
    e.bucket = r.bucket;
    e.target = out.target;
    e.tiles = r.tiles.best;
    e.tuned_ms = r.tiles.best_ms;
    e.heuristic_tiles = r.tiles.heuristic;
    e.heuristic_ms = r.tiles.heuristic_ms;
    out.entries.push_back(e);
    out.buckets.push_back(r);
  }
  out.seconds = clock.seconds();
  return out;
}

}  // namespace flashjit::tune
