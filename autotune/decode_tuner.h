// The key-split tuning of one spec's decode calls on this process's GPU (`flashjit tune
// --decode`): on each decode shape, the heuristic's split count and a spread of others up to
// what the call allows are timed, each checked against the heuristic's output, and the fastest
// is kept when it beats the heuristic's by more than min_gain.
#pragma once

#include <string>
#include <vector>

#include "autotune/fastest.h"
#include "autotune/timed_inputs.h"
#include "flashjit/flashjit.h"
#include "runtime/decode_splits.h"
#include "runtime/tune_db.h"
#include "runtime/tune_key.h"

namespace flashjit::tune {

// The timed shapes: every batch against every KV cache length, with one GQA grouping (the
// defaults are the benchmark's decode grid, bench/decode.py, at GQA 4).
struct DecodeTuneOptions {
  std::vector<int> batches = {1, 16, 128};
  std::vector<int> seqlens_k = {4096, 32768, 131072};
  int seqlen_q = 1;
  int heads_q = 32, heads_kv = 8;
  TimingOptions timing;
};

struct DecodeShapes {
  std::vector<CallShape> shapes;
  std::vector<std::string> left_out;  // "b128 h32/8 q1 k131072: K and V hold 32 GiB, ..."
};

// The shapes to time, in order; a shape whose K and V exceed the benchmark's 24 GiB, or
// whose decode bucket an earlier shape already covers, is left out with the reason. Throws
// Error(Usage), before any GPU is needed, for options that give no shape or a shape that does
// not run the decode kernels with this spec (too many packed rows, too few keys, a spec with
// decode: never or a block mask).
DecodeShapes decode_shapes(const Spec& spec, const DecodeTuneOptions& options);

// The split counts to time for a call that allows `range`: the heuristic's first, then 1 and a
// spread (powers of two and the midpoints between them), and range.most, ascending.
std::vector<int> kv_split_candidates(const rt::KvSplitRange& range);

struct DecodeShapeResult {
  CallShape shape;
  DecodeBucket bucket;
  Fastest<int> splits;
  int candidates = 0;  // split counts tried
};

struct DecodeTuneResult {
  Spec spec;
  std::string target;
  std::vector<DecodeShapeResult> shapes;  // those timed
  std::vector<std::string> left_out;
  bool budget_exhausted = false;
  double seconds = 0;
  std::vector<DecodeEntry> entries;  // one per timed shape, ready for TuneDb::record
};

// Throws Error(Usage) as decode_shapes does, or when the decode kernels fail the fp64
// reference check; Error(NoDevice) without a GPU.
DecodeTuneResult tune_decode(Runtime& runtime, const Spec& spec, const DecodeTuneOptions& options,
                             const Progress& progress);

}  // namespace flashjit::tune
