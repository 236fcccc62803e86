#include "autotune/tuner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "autotune/candidates.h"
#include "generator/plan.h"
#include "runtime/call_traits.h"
#include "runtime/driver.h"
#include "runtime/kernel_compiler.h"
#include "verify/attention_run.h"
#include "verify/half.h"
#include "verify/random.h"

namespace flashjit::tune {
namespace {

using Clock = std::chrono::steady_clock;

// The benchmark's shapes (bench/shapes.py, the FlashAttention papers).
constexpr int kTokens = 16384;
constexpr int kHidden = 2048;
// Input sets rotate until one rotation touches this many bytes, so no timed launch finds its
// tensors in L2 (60 MB on the H200; 256 MiB is over 4x any current GPU's L2). The default
// shapes' one set is 256 MiB already.
constexpr size_t kRotationBytes = size_t{256} << 20;
constexpr int kMaxSets = 16;
// A candidate whose first timed launch is this much slower than the best so far cannot win:
// it is not timed further (this keeps hopeless tilings from eating the budget).
constexpr double kHopeless = 1.5;
// The small odd shape every candidate must pass against the fp64 reference: seqlens that are
// no multiple of any tile, seqlen_q < seqlen_k (bottom-right causal), GQA.
verify::Shape check_shape() {
  verify::Shape shape;
  shape.heads_q = 2;
  shape.seqlen_q = 257;
  shape.seqlen_k = 300;
  return shape;
}
constexpr uint64_t kSeed = 0x5eed;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
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

// The device tensors of one bucket: `sets` input/output sets rotated between launches, and
// the heuristic kernel's output on set 0, which every other candidate must reproduce.
struct BucketBench {
  BucketResult result;
  std::vector<rt::DeviceBuffer> buffers;  // q, k, v, o, lse per set
  std::vector<ForwardArgs> args;          // one per set
  size_t o_elements = 0, lse_elements = 0;
  std::vector<uint16_t> heuristic_o;
  std::vector<float> heuristic_lse;
};

BucketBench make_bench(const Spec& spec, const TimedShape& shape,
                       const std::vector<uint16_t>& pool) {
  rt::Driver& driver = rt::Driver::get();
  BucketBench bench;
  bench.result.shape = shape;
  bench.result.bucket = bucket_for(shape.seqlen, shape.seqlen, shape.batch, shape.heads);
  const size_t rows = size_t{1} * shape.batch * shape.seqlen * shape.heads;
  const size_t qk_elements = rows * spec.head_dim_qk, v_elements = rows * spec.head_dim_v;
  bench.o_elements = v_elements;
  bench.lse_elements = rows;
  const size_t set_bytes = 2 * (2 * qk_elements + 2 * v_elements) + 4 * rows;
  const int sets =
      static_cast<int>(std::clamp<size_t>((kRotationBytes + set_bytes - 1) / set_bytes, 1, kMaxSets));
  const auto upload = [&](size_t elements, size_t offset) {
    rt::DeviceBuffer buffer(elements * 2);
    driver.copy_to_device(buffer.ptr(), pool.data() + offset, elements * 2);
    return buffer;
  };
  for (int s = 0; s < sets; ++s) {
    // Q, K and V of every set start at different places of the random pool.
    const size_t base = size_t{3} * s * 4099;
    ForwardArgs a =
        ForwardArgs::contiguous(spec, shape.batch, shape.heads, shape.heads, shape.seqlen, shape.seqlen);
    bench.buffers.push_back(upload(qk_elements, base));
    bench.buffers.push_back(upload(qk_elements, base + 4099));
    bench.buffers.push_back(upload(v_elements, base + 2 * 4099));
    bench.buffers.emplace_back(v_elements * 2);
    bench.buffers.emplace_back(rows * 4);
    const size_t at = bench.buffers.size() - 5;
    a.q = bench.buffers[at].get();
    a.k = bench.buffers[at + 1].get();
    a.v = bench.buffers[at + 2].get();
    a.o = bench.buffers[at + 3].get();
    a.lse = reinterpret_cast<float*>(bench.buffers[at + 4].get());
    bench.args.push_back(a);
  }
  return bench;
}

// Launches on set 0 and reads O and LSE back.
void run_once(Kernel& kernel, const BucketBench& bench, std::vector<uint16_t>& o,
              std::vector<float>& lse) {
  rt::Driver& driver = rt::Driver::get();
  const ForwardArgs& a = bench.args[0];
  driver.memset_u8(reinterpret_cast<rt::DevicePtr>(a.o), 0xFF, bench.o_elements * 2);
  kernel.forward(a, nullptr);
  driver.synchronize();
  o.resize(bench.o_elements);
  lse.resize(bench.lse_elements);
  driver.copy_to_host(o.data(), reinterpret_cast<rt::DevicePtr>(a.o), o.size() * 2);
  driver.copy_to_host(lse.data(), reinterpret_cast<rt::DevicePtr>(a.lse), lse.size() * 4);
}

// "" when `o`/`lse` match the heuristic kernel's output. Both kernels are within the dtype's
// tolerance of the fp64 reference (verify::tolerances_for), so they are within twice it of
// each other; a wrong tiling (a dropped key block, a bad mask edge) misses by far more.
std::string differs_from_heuristic(DType dtype, const BucketBench& bench,
                                   const std::vector<uint16_t>& o, const std::vector<float>& lse) {
  const verify::Tolerances tol = verify::tolerances_for(dtype);
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    const double got = verify::decode(dtype, o[i]);
    const double want = verify::decode(dtype, bench.heuristic_o[i]);
    const double diff = std::fabs(got - want);
    if (!(diff <= 2 * (tol.o.atol + tol.o.rtol * std::fabs(want)))) {  // NaN fails too
      if (bad++ == 0) first = i;
      if (!(diff <= worst)) worst = diff;
    }
  }
  if (bad)
    return fmt::format("{} O elements differ from the heuristic kernel's (first at {}, worst {:.3g})",
                       bad, first, worst);
  for (size_t i = 0; i < lse.size(); ++i) {
    const double diff = std::fabs(double{lse[i]} - bench.heuristic_lse[i]);
    if (!(diff <= 2 * tol.lse.atol) && lse[i] != bench.heuristic_lse[i])  // -inf == -inf
      return fmt::format("LSE element {} is {} where the heuristic kernel wrote {}", i, lse[i],
                         bench.heuristic_lse[i]);
  }
  return "";
}

// Median of `iters` event-timed launches after `warmup`, rotating input sets. Gives up after
// the first timed launch when it is `hopeless_ms` or slower (returns that launch's time).
double time_kernel(Kernel& kernel, const BucketBench& bench, int warmup, int iters,
                   double hopeless_ms) {
  rt::Driver& driver = rt::Driver::get();
  size_t set = 0;
  const auto next_args = [&]() -> const ForwardArgs& {
    return bench.args[set++ % bench.args.size()];
  };
  for (int n = 0; n < warmup; ++n) kernel.forward(next_args(), nullptr);
  const rt::Event start, stop;
  std::vector<float> times;
  for (int n = 0; n < std::max(iters, 1); ++n) {
    driver.event_record(start.get(), nullptr);
    kernel.forward(next_args(), nullptr);
    driver.event_record(stop.get(), nullptr);
    times.push_back(driver.event_elapsed_ms(start.get(), stop.get()));
    if (n == 0 && times[0] >= hopeless_ms) return times[0];
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
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
  const Clock::time_point started = Clock::now();
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
  CompilePool pool(runtime, spec, out.target, align_bytes, space.candidates, threads);

  // Inputs, prepared while the first candidates compile: one random pool that every tensor
  // of every bucket is a window of (generating fresh numbers for ~1 GiB would take longer
  // than the tuning itself).
  std::vector<TimedShape> shapes;
  size_t largest = 0;
  for (int seqlen : options.seqlens) {
    shapes.push_back(timed_shape(spec, seqlen, options.batch_heads));
    const TimedShape& s = shapes.back();
    largest = std::max(largest, size_t{1} * s.batch * s.heads * s.seqlen *
                                    std::max(spec.head_dim_qk, spec.head_dim_v));
  }
  std::vector<uint16_t> random_pool(largest + size_t{3} * kMaxSets * 4099);
  verify::RandomInputs(kSeed).fill(spec.dtype, random_pool);
  std::vector<BucketBench> benches;
  for (const TimedShape& s : shapes) benches.push_back(make_bench(spec, s, random_pool));

  std::vector<uint16_t> o;
  std::vector<float> lse;
  const size_t n = space.candidates.size();
  for (size_t i = 0; i < n; ++i) {
    const Tiles tiles = space.candidates[i];
    const std::string label = tiles_label(tiles);
    const bool heuristic = i == 0;
    if (!heuristic && options.budget_s > 0 && seconds_since(started) > options.budget_s) {
      out.budget_exhausted = true;
      pool.stop();
      progress(fmt::format("budget of {} s spent: {} candidates left untimed", options.budget_s,
                           n - i));
      break;
    }
    const CompileOutcome compiled = pool.wait(i);
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
      run_once(*kernel, bench, o, lse);
      if (heuristic) {
        bench.heuristic_o = o;
        bench.heuristic_lse = lse;
      } else if (const std::string why = differs_from_heuristic(spec.dtype, bench, o, lse);
                 !why.empty()) {
        ++r.rejected;
        progress(fmt::format("[{:2}/{}] {} {}: rejected, {}", i + 1, n, label, where, why));
        continue;
      }
      const double hopeless = heuristic ? INFINITY : kHopeless * r.best_ms;
      const double ms = time_kernel(*kernel, bench, options.warmup, options.iters, hopeless);
      ++r.timed;
      if (heuristic) {
        r.heuristic_tiles = r.best_tiles = tiles;
        r.heuristic_ms = r.best_ms = ms;
      } else if (ms < r.best_ms) {
        r.best_tiles = tiles;
        r.best_ms = ms;
      }
      progress(fmt::format("[{:2}/{}] {} {}: {:.4f} ms{}  best {} {:.4f} ms ({:.2f}x heuristic)",
                           i + 1, n, label, where, ms, ms >= hopeless ? " (hopeless, stopped)" : "",
                           tiles_label(r.best_tiles), r.best_ms, r.heuristic_ms / r.best_ms));
    }
  }

  for (BucketBench& bench : benches) {
    BucketResult& r = bench.result;
    // Within min_gain of the heuristic is noise: keep the tested default.
    if (r.best_ms > r.heuristic_ms * (1 - options.min_gain)) {
      r.best_tiles = r.heuristic_tiles;
      r.best_ms = r.heuristic_ms;
    }
    TuneEntry e;
    e.gpu = gpu;
    e.spec_hash = spec_hash(spec);
    e.spec_summary = spec_summary(spec);
    e.bucket = r.bucket;
    e.target = out.target;
    e.tiles = r.best_tiles;
    e.tuned_ms = r.best_ms;
    e.heuristic_tiles = r.heuristic_tiles;
    e.heuristic_ms = r.heuristic_ms;
    out.entries.push_back(e);
    out.buckets.push_back(r);
  }
  out.seconds = seconds_since(started);
  return out;
}

}  // namespace flashjit::tune
