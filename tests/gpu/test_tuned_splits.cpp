// Decode's key splits on the GPU: a tune DB decode entry for this GPU, spec and decode bucket
// sets the count (the workspace a call needs says how many) and the output stays right; the
// call's own kv_splits wins over it; a count past the call's key tiles is cut to them.
#include <doctest/doctest.h>

#include "generator/dec_sm80_path.h"
#include "generator/targets.h"
#include "runtime/call_traits.h"
#include "runtime/decode_params.h"
#include "runtime/operation.h"
#include "runtime/tune_db.h"
#include "tests/cpu/runtime_test_support.h"
#include "tests/gpu/gpu_grid.h"
#include "tests/gpu/gpu_runtime.h"
#include "verify/decode_run.h"

namespace flashjit::gpu_test {
namespace {

// The workspace of a decode call with `splits` key splits.
size_t bytes_for(const Spec& spec, const ForwardArgs& args, int splits) {
  return rt::workspace_bytes(rt::decode_scratch(spec, args, splits));
}

// The counts the call allows on this GPU, and the heuristic's.
rt::KvSplitRange range_of(const Spec& spec, const ForwardArgs& args) {
  const DeviceInfo info = gpu_runtime().device();
  const std::string target = gen::target_for_device(info.cc_major, info.cc_minor);
  const gen::Plan plan =
      rt::plan_decode(spec, target, rt::decode_call_traits(spec, args),
                      gen::dec_sm80_tiles(spec, target, rt::decode_packed_rows(args)))
          .launches[0];
  return rt::decode_kv_split_range(plan, args, info.sm_count);
}

tune::DecodeEntry entry_for(const Spec& spec, const ForwardArgs& args, int kv_splits) {
  tune::DecodeEntry e;
  e.gpu = tune::gpu_identity(gpu_runtime().device());
  e.spec_hash = tune::spec_hash(spec);
  e.bucket = tune::decode_bucket_for(rt::decode_packed_rows(args), args.seqlen_k, args.batch,
                                     args.heads_kv);
  e.kv_splits = kv_splits;
  return e;
}

}  // namespace

TEST_CASE("tuned splits: the DB's count for the call's decode bucket is used; the call's own wins") {
  const test::TempDir dir;
  const std::string db_path = (dir.path() / "tune.json").string();
  const test::ScopedEnv db_env("FLASHJIT_TUNE_DB", db_path);
  Spec spec = make_spec(128, 128, DType::BF16, false);
  spec.name = "tuned_splits_hd128";
  verify::DecodeShape shape;
  shape.batch = 2;
  shape.heads_q = 8;
  shape.heads_kv = 2;
  shape.seqlen_k = 5000;
  // Never dereferenced: forward_workspace_bytes only sizes the call.
  alignas(256) static char memory[256];
  ForwardArgs args = ForwardArgs::contiguous(spec, 2, 8, 2, 1, 5000);
  args.q = args.k = args.v = memory;
  args.o = memory;
  const rt::KvSplitRange range = range_of(spec, args);
  CHECK(gpu_runtime().kernel(spec)->forward_workspace_bytes(args) ==
        bytes_for(spec, args, range.heuristic));

  const int tuned = range.heuristic == 3 ? 5 : 3;
  tune::TuneDb(db_path).record({entry_for(spec, args, tuned)});
  // A kernel asks the DB once a decode bucket: a fresh one sees the entry.
  CHECK(gpu_runtime().kernel(spec)->forward_workspace_bytes(args) == bytes_for(spec, args, tuned));
  verify::RunOptions options;
  options.iters = 0;
  const verify::RunResult r = verify::run_decode(gpu_runtime(), spec, shape, options);
  INFO(r.kernel, ": ", r.failure);
  CHECK(r.passed);

  args.kv_splits = 2;
  CHECK(gpu_runtime().kernel(spec)->forward_workspace_bytes(args) == bytes_for(spec, args, 2));
  args.kv_splits = 0;

  // More splits than the call has key tiles are cut to them.
  tune::TuneDb(db_path).record({entry_for(spec, args, rt::kMaxKvSplits)});
  REQUIRE(range.most < rt::kMaxKvSplits);
  CHECK(gpu_runtime().kernel(spec)->forward_workspace_bytes(args) ==
        bytes_for(spec, args, range.most));
  const verify::RunResult cut = verify::run_decode(gpu_runtime(), spec, shape, options);
  INFO(cut.kernel, ": ", cut.failure);
  CHECK(cut.passed);
}

}  // namespace flashjit::gpu_test
