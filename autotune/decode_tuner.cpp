#include "autotune/decode_tuner.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "generator/dec_sm80_path.h"
#include "generator/targets.h"
#include "runtime/call_traits.h"
#include "runtime/decode_params.h"
#include "runtime/driver.h"
#include "runtime/operation.h"
#include "verify/decode_run.h"

namespace flashjit::tune {
namespace {

// K and V above this are left out, as bench/decode.py leaves them out: the tuned buckets are
// the benchmarked ones, and the largest fits one rotation set on a 40 GB GPU.
constexpr size_t kMaxCacheBytes = size_t{24} << 30;

size_t cache_bytes(const Spec& spec, const CallShape& s) {
  return size_t{2} * s.batch * s.seqlen_k * s.heads_kv * (spec.head_dim_qk + spec.head_dim_v);
}

// The decode kernels' fp64 check before any timing, at the timed shapes' GQA group and query
// rows: ragged cache lengths (0 included) and a capacity that is no multiple of a key tile.
verify::DecodeShape check_shape(const DecodeTuneOptions& o) {
  verify::DecodeShape shape;
  shape.batch = 3;
  shape.heads_kv = 2;
  shape.heads_q = 2 * (o.heads_q / o.heads_kv);
  shape.seqlen_q = o.seqlen_q;
  shape.seqlen_k = 1037;
  shape.cache_seqlens = {1037, 600, 0};
  return shape;
}

// The split counts the call in `args` allows on this GPU, and the heuristic's.
rt::KvSplitRange split_range(const Spec& spec, const std::string& target,
                             const ForwardArgs& args, int sm_count) {
  const gen::Plan split_plan =
      rt::plan_decode(spec, target, rt::decode_call_traits(spec, args),
                      gen::dec_sm80_tiles(spec, target, rt::decode_packed_rows(args)))
          .launches[0];
  return rt::decode_kv_split_range(split_plan, args, sm_count);
}

DecodeBucket bucket_of(const CallShape& s) {
  return decode_bucket_for(s.seqlen_q * (s.heads_q / s.heads_kv), s.seqlen_k, s.batch,
                           s.heads_kv);
}

}  // namespace

DecodeShapes decode_shapes(const Spec& spec, const DecodeTuneOptions& o) {
  spec.validate();
  if (o.batches.empty() || o.seqlens_k.empty())
    throw Error(ErrorKind::Usage, "no decode shapes to tune (--batches and --seqlens-k)");
  if (o.heads_q < 1 || o.heads_kv < 1 || o.heads_q % o.heads_kv != 0)
    throw Error(ErrorKind::Usage,
                fmt::format("--heads {} must be a positive multiple of --heads-kv {}", o.heads_q,
                            o.heads_kv));
  DecodeShapes out;
  std::set<DecodeBucket> seen;
  for (int batch : o.batches) {
    for (int seqlen_k : o.seqlens_k) {
      const CallShape shape{batch, o.heads_q, o.heads_kv, o.seqlen_q, seqlen_k};
      if (batch < 1 || seqlen_k < 1 || o.seqlen_q < 1)
        throw Error(ErrorKind::Usage,
                    fmt::format("decode shape {}: sizes must be >= 1", describe(shape)));
      const ForwardArgs args =
          ForwardArgs::contiguous(spec, batch, o.heads_q, o.heads_kv, o.seqlen_q, seqlen_k);
      if (!rt::takes_decode(spec, args))
        throw Error(ErrorKind::Usage,
                    fmt::format("decode shape {} of spec {} runs the forward kernel, not decode's "
                                "(decode takes at most {} packed query rows, here {} = seqlen_q x "
                                "heads / heads-kv, against at least {} keys, and no spec with "
                                "decode: never or a block mask)",
                                describe(shape), spec.name, rt::kDecodeMaxPackedRows,
                                rt::decode_packed_rows(args), rt::kDecodeMinKeys));
      const size_t bytes = cache_bytes(spec, shape);
      if (bytes > kMaxCacheBytes) {
        out.left_out.push_back(fmt::format("{}: K and V hold {:.1f} GiB, over the benchmark's 24",
                                           describe(shape), bytes / double(size_t{1} << 30)));
      } else if (!seen.insert(bucket_of(shape)).second) {
        out.left_out.push_back(fmt::format("{}: its bucket {} is timed already", describe(shape),
                                           describe(bucket_of(shape))));
      } else {
        out.shapes.push_back(shape);
      }
    }
  }
  return out;
}

std::vector<int> kv_split_candidates(const rt::KvSplitRange& range) {
  std::vector<int> out = {range.heuristic};
  const auto add = [&](int splits) {
    if (splits <= range.most && std::find(out.begin(), out.end(), splits) == out.end())
      out.push_back(splits);
  };
  for (int p = 1; p <= rt::kMaxKvSplits; p *= 2) {
    add(p);
    add(p + p / 2);
  }
  add(range.most);
  return out;
}

DecodeTuneResult tune_decode(Runtime& runtime, const Spec& spec, const DecodeTuneOptions& options,
                             const Progress& progress) {
  const TuningClock clock;
  DecodeTuneResult out;
  out.spec = spec;
  const DecodeShapes shapes = decode_shapes(spec, options);
  out.left_out = shapes.left_out;
  if (!runtime.has_device())
    throw Error(ErrorKind::NoDevice, fmt::format("tuning {} needs a GPU: {}", spec.name,
                                                 rt::Driver::unavailable_reason()));
  const DeviceInfo info = runtime.device();
  out.target = gen::target_for_device(info.cc_major, info.cc_minor);
  progress(fmt::format("{} ({}) on {}: decode key splits on {} shape{}, {} left out", spec.name,
                       spec_summary(spec), out.target, shapes.shapes.size(),
                       shapes.shapes.size() == 1 ? "" : "s", shapes.left_out.size()));
  for (const std::string& why : shapes.left_out) progress("  left out " + why);

  verify::RunOptions check;
  check.iters = 0;
  check.seed = kSeed;
  const verify::RunResult small = verify::run_decode(runtime, spec, check_shape(options), check);
  if (!small.passed)
    throw Error(ErrorKind::Usage, fmt::format("the decode kernel {} fails the fp64 reference "
                                              "check: {}", small.kernel, small.failure));

  size_t largest = 0;
  for (const CallShape& s : shapes.shapes)
    largest = std::max(largest, size_t{1} * s.batch * s.seqlen_k * s.heads_kv *
                                    std::max(spec.head_dim_qk, spec.head_dim_v));
  const std::vector<uint16_t> pool = random_pool(spec.dtype, largest);
  const std::shared_ptr<Kernel> kernel = runtime.kernel(spec);
  const TimingOptions& timing = options.timing;
  for (size_t s = 0; s < shapes.shapes.size() && !out.budget_exhausted; ++s) {
    DecodeShapeResult r;
    r.shape = shapes.shapes[s];
    r.bucket = bucket_of(r.shape);
    const std::string where = fmt::format("{} [{}]", describe(r.shape), describe(r.bucket));
    TimedInputs inputs = make_timed_inputs(spec, r.shape, pool);
    const rt::KvSplitRange range = split_range(spec, out.target, inputs.args[0], info.sm_count);
    const std::vector<int> candidates = kv_split_candidates(range);
    r.candidates = static_cast<int>(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) {
      const bool heuristic = i == 0;
      if (!heuristic && clock.budget_spent(timing)) {
        out.budget_exhausted = true;
        progress(fmt::format("budget of {} s spent: {} split counts and {} shapes left untimed",
                             timing.budget_s, candidates.size() - i, shapes.shapes.size() - s - 1));
        break;
      }
      // Always a count of the call's own: 0 would let a tune DB entry pick it.
      const int splits = candidates[i];
      for (ForwardArgs& a : inputs.args) a.kv_splits = splits;
      progress(fmt::format(
          "[{:2}/{}] {} {}: {}", i + 1, candidates.size(), candidate_label(splits), where,
          r.splits.measure(*kernel, inputs, spec.dtype, splits, heuristic, timing)));
    }
    // An entry that keeps the heuristic (0) leaves the count to follow each call's shape
    // within the bucket.
    const bool tuned = r.splits.settle(timing);
    DecodeEntry& e = out.entries.emplace_back();  // tuned_at: TuneDb::record stamps it
    e.gpu = gpu_identity(info);
    e.spec_hash = spec_hash(spec);
    e.spec_summary = spec_summary(spec);
    e.bucket = r.bucket;
    e.kv_splits = tuned ? r.splits.best : 0;
    e.heuristic_kv_splits = r.splits.heuristic;
    e.tuned_ms = r.splits.best_ms;
    e.heuristic_ms = r.splits.heuristic_ms;
    out.shapes.push_back(r);
  }
  out.seconds = clock.seconds();
  return out;
}

}  // namespace flashjit::tune
