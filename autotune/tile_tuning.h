// What the two tile tuners share (tune_spec, the forward's, and tune_backward): their
// options, the timed shapes and buckets, the fp64 check's shape, what each bucket found and
// the tune DB entry it becomes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autotune/fastest.h"
#include "autotune/timed_inputs.h"
#include "flashjit/flashjit.h"
#include "runtime/tune_db.h"
#include "runtime/tune_key.h"
#include "verify/attention_run.h"

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
// The call of a timed shape (contiguous tensors, as many KV heads as query heads).
CallShape call_shape(const TimedShape& shape);
ShapeBucket bucket_of(const TimedShape& shape);

// What a tuning of `spec` runs on: this runtime's GPU, its target and the timed shapes of
// `options`. Throws Error(NoDevice) without a GPU and Error(Usage) without seqlens.
struct TuningSetup {
  DeviceInfo device;
  std::string target;
  std::vector<TimedShape> shapes;
};
TuningSetup tuning_setup(Runtime& runtime, const Spec& spec, const TuneOptions& options);
// Random numbers for every tensor of the shapes (random_pool for the largest).
std::vector<uint16_t> pool_for(const Spec& spec, const std::vector<TimedShape>& shapes);

// The small odd shape every candidate must pass against the fp64 reference: seqlens that are
// no multiple of any tile, seqlen_q < seqlen_k (bottom-right causal), GQA.
verify::Shape check_shape();

// What one bucket's timing found: `Candidate` is the tiles of the tuned pass (Tiles, or the
// backward's BackwardTiles).
template <class Candidate>
struct BucketResult {
  ShapeBucket bucket;
  TimedShape shape;
  Fastest<Candidate> tiles;
};

// What tuning one spec found, with its tune DB `Entry` a bucket.
template <class Candidate, class Entry>
struct TuneResult {
  Spec spec;
  std::string target;
  std::vector<BucketResult<Candidate>> buckets;
  int candidates = 0;  // after pruning
  int pruned = 0;
  std::vector<std::string> dropped;  // "m128n32w4s2: spills 64 bytes" and other reasons
  bool budget_exhausted = false;
  double seconds = 0;
  std::vector<Entry> entries;  // one per bucket, ready for TuneDb::record
};

// Settles a bucket's timing (TimingOptions::min_gain) and adds it to `out` with its tune DB
// entry: key, tiles and times (a backward entry's paths are the caller's to add).
template <class Candidate, class Entry>
void add_settled(TuneResult<Candidate, Entry>& out, const TuningSetup& setup,
                 BucketResult<Candidate> r, const TimingOptions& timing) {
  r.tiles.settle(timing);
  Entry e;
  e.gpu = gpu_identity(setup.device);
  e.spec_hash = spec_hash(out.spec);
  e.spec_summary = spec_summary(out.spec);
  e.bucket = r.bucket;
  e.target = setup.target;
  e.tiles = r.tiles.best;
  e.heuristic_tiles = r.tiles.heuristic;
  e.tuned_ms = r.tiles.best_ms;
  e.heuristic_ms = r.tiles.heuristic_ms;
  out.entries.push_back(e);
  out.buckets.push_back(std::move(r));
}

}  // namespace flashjit::tune
