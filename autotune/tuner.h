// The tuning loop of one spec on this process's GPU: candidate tiles compile on CPU threads
// while the GPU times those already built, on the benchmark's shapes, every candidate checked
// (fp64 reference on a small odd shape, then against the heuristic kernel's output on the
// timed shape) before it can win.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autotune/fastest.h"
#include "autotune/timed_inputs.h"
#include "flashjit/flashjit.h"
#include "runtime/tune_db.h"
#include "runtime/tune_key.h"

namespace flashjit::tune {

struct TuneOptions {
  std::vector<int> seqlens = {1024, 4096, 16384};  // seqlen_q == seqlen_k
  // batch * heads of the timed shapes; default the benchmark's 16k tokens: batch =
  // 16384 / seqlen, heads = 2048 / head_dim_qk (every bf16 tensor 64 MiB, above L2).
  std::optional<int> batch_heads;
  TimingOptions timing;
  unsigned compile_threads = 0;  // 0: every hardware thread
};

// One timed shape of a bucket.
struct TimedShape {
  int batch = 0, heads = 0, seqlen = 0;
};
TimedShape timed_shape(const Spec& spec, int seqlen, const std::optional<int>& batch_heads);

struct BucketResult {
  ShapeBucket bucket;
  TimedShape shape;
  Fastest<Tiles> tiles;
};

struct SpecTuneResult {
  Spec spec;
  std::string target;
  std::vector<BucketResult> buckets;
  int candidates = 0;  // after pruning
  int pruned = 0;
  std::vector<std::string> dropped;  // "m128n32w4s2: spills 64 bytes" and other reasons
  bool budget_exhausted = false;
  double seconds = 0;
  std::vector<TuneEntry> entries;  // one per bucket, ready for TuneDb::record
};

// Throws Error(NoDevice) without a GPU, Error(Usage) for a spec that cannot be tuned, and
// Error(Compile/Driver) when the heuristic kernel itself cannot be built or checked.
SpecTuneResult tune_spec(Runtime& runtime, const Spec& spec, const TuneOptions& options,
                         const Progress& progress);

}  // namespace flashjit::tune
