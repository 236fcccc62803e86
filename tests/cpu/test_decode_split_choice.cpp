// Where a decode call's key splits come from, as the runtime decides without a GPU: the
// call's kv_splits, else the tune DB's count for its decode bucket, else the heuristic; cut to
// what the call allows, and said so for FLASHJIT_VERBOSE.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "runtime/decode_params.h"
#include "runtime/decode_splits.h"
#include "runtime/forward_params.h"
#include "runtime/tune_db.h"
#include "runtime/tune_db_splits.h"
#include "tests/cpu/runtime_test_support.h"

namespace flashjit::rt {
namespace {

using test::contains;

DeviceInfo h200() { return DeviceInfo{"NVIDIA H200", 9, 0, 132, 13000}; }

tune::DecodeEntry entry_for(const Spec& spec, const tune::DecodeBucket& bucket, int kv_splits) {
  tune::DecodeEntry e;
  e.gpu = tune::gpu_identity(h200());
  e.spec_hash = tune::spec_hash(spec);
  e.spec_summary = tune::spec_summary(spec);
  e.bucket = bucket;
  e.kv_splits = kv_splits;
  e.heuristic_kv_splits = 32;
  return e;
}

std::string shape_error(const Spec& spec, const ForwardArgs& args) {
  return test::error_of_kind(ErrorKind::Shape, [&] { check_forward_args(spec, args); });
}

}  // namespace

TEST_CASE("decode splits: the call's count, else the tune DB's, else the heuristic's") {
  const KvSplitRange range{32, 100};
  KvSplitChoice c = choose_kv_splits(range, 0, 0);
  CHECK(c.splits == 32);
  CHECK(c.source == KvSplitSource::Heuristic);
  c = choose_kv_splits(range, 0, 24);
  CHECK(c.splits == 24);
  CHECK(c.source == KvSplitSource::TuneDb);
  c = choose_kv_splits(range, 7, 24);
  CHECK(c.splits == 7);
  CHECK(c.source == KvSplitSource::Caller);
  // Above what the call allows (its key tiles, the grid's z): cut, and remembered as asked.
  c = choose_kv_splits(range, 0, 128);
  CHECK(c.splits == 100);
  CHECK(c.asked == 128);
  CHECK(choose_kv_splits(range, 120, 0).splits == 100);
}

TEST_CASE("decode splits: FLASHJIT_VERBOSE's words say where the count came from") {
  const KvSplitRange range{32, 10};
  CHECK(describe(choose_kv_splits({1, 1}, 0, 0), "no entry") == "1 key split (heuristic: no entry)");
  CHECK(describe(choose_kv_splits({8, 10}, 0, 6), "6 key splits from tune DB x") ==
        "6 key splits (tuned: 6 key splits from tune DB x)");
  CHECK(describe(choose_kv_splits(range, 0, 64), "n") ==
        "10 key splits (tuned, cut from 64 to the 10 the call allows: n)");
  CHECK(describe(choose_kv_splits(range, 3, 0), "") == "3 key splits (the call's kv_splits)");
}

TEST_CASE("decode splits: the runtime's tune DB lookup goes by GPU, spec and decode bucket") {
  const test::TempDir dir;
  const std::string path = (dir.path() / "tune.json").string();
  const test::ScopedEnv db("FLASHJIT_TUNE_DB", path);
  const Spec spec = test::spec_of(128, 128);
  const tune::DecodeBucket bucket = tune::decode_bucket_for(4, 32768, 16, 8);
  TunedKvSplits tuned = tuned_kv_splits(spec, h200(), bucket);
  CHECK(tuned.splits == 0);
  CHECK(contains(tuned.note, "no entry for this GPU in tune DB " + path));

  tune::TuneDb(path).record({entry_for(spec, bucket, 24),
                             entry_for(spec, tune::decode_bucket_for(4, 4096, 16, 8), 0)});
  tuned = tuned_kv_splits(spec, h200(), bucket);
  CHECK(tuned.splits == 24);
  CHECK(contains(tuned.note, "24 key splits from tune DB"));
  // An entry that keeps the heuristic gives no count, and says why.
  tuned = tuned_kv_splits(spec, h200(), tune::decode_bucket_for(4, 4096, 16, 8));
  CHECK(tuned.splits == 0);
  CHECK(contains(tuned.note, "the heuristic's key splits"));
  // Another GPU, spec or bucket: nothing.
  DeviceInfo h100 = h200();
  h100.name = "NVIDIA H100";
  CHECK(tuned_kv_splits(spec, h100, bucket).splits == 0);
  CHECK(tuned_kv_splits(test::spec_of(64, 64), h200(), bucket).splits == 0);
  CHECK(tuned_kv_splits(spec, h200(), tune::decode_bucket_for(8, 32768, 16, 8)).splits == 0);
  // A corrupt DB is a miss with the reason, never an error for the call.
  std::ofstream(path) << "{ not json";
  tuned = tuned_kv_splits(spec, h200(), bucket);
  CHECK(tuned.splits == 0);
  CHECK(contains(tuned.note, "unusable"));
}

TEST_CASE("decode splits: ForwardArgs::kv_splits is checked: 0..128, decode calls only") {
  const Spec spec = test::spec_of(128, 128);
  alignas(256) static char memory[256];
  ForwardArgs args = ForwardArgs::contiguous(spec, 1, 32, 8, 1, 32768);
  args.q = args.k = args.v = memory;
  args.o = memory;
  args.kv_splits = 24;
  CHECK(shape_error(spec, args).empty());
  args.kv_splits = kMaxKvSplits;
  CHECK(shape_error(spec, args).empty());
  args.kv_splits = kMaxKvSplits + 1;
  CHECK(contains(shape_error(spec, args), "kv_splits = 129 must be 0 (the runtime's choice) or 1..128"));
  args.kv_splits = -1;
  CHECK(contains(shape_error(spec, args), "kv_splits = -1 must be 0"));
  // 1024 query rows run the forward kernel: a split count there is the caller's mistake.
  ForwardArgs prefill = ForwardArgs::contiguous(spec, 1, 32, 8, 1024, 32768);
  prefill.q = prefill.k = prefill.v = memory;
  prefill.o = memory;
  prefill.kv_splits = 4;
  CHECK(contains(shape_error(spec, prefill), "kv_splits = 4 is for calls that run the decode "
                                             "kernels, and this one runs the forward kernel"));
}

}  // namespace flashjit::rt
