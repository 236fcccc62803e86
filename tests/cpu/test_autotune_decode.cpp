// The decode tuner's logic without a GPU: the shapes it times (and those it leaves out or
// refuses) and the split counts it tries. The command's flags are in test_cli.cpp.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autotune/decode_tuner.h"
#include "tests/cpu/runtime_test_support.h"

namespace flashjit::tune {
namespace {

using test::contains;

std::string usage_error(const Spec& spec, const DecodeTuneOptions& options) {
  return test::error_of_kind(ErrorKind::Usage, [&] { decode_shapes(spec, options); });
}

}  // namespace

TEST_CASE("autotune decode: the default grid, less what is too large or already bucketed") {
  const Spec spec = test::spec_of(128, 128);
  const DecodeShapes shapes = decode_shapes(spec, DecodeTuneOptions{});
  // 3 batches x 3 cache lengths; b128 x 131072 keys x 8 KV heads x d128 is 64 GiB of K and V.
  CHECK(shapes.shapes.size() == 8);
  REQUIRE(shapes.left_out.size() == 1);
  CHECK(contains(shapes.left_out[0], "b128 h32/8 q1 k131072: K and V hold 64.0 GiB"));
  CHECK(describe(shapes.shapes[0]) == "b1 h32/8 q1 k4096");

  DecodeTuneOptions same_bucket;
  same_bucket.batches = {9, 16};
  same_bucket.seqlens_k = {4096};
  const DecodeShapes deduplicated = decode_shapes(spec, same_bucket);
  CHECK(deduplicated.shapes.size() == 1);
  REQUIRE(deduplicated.left_out.size() == 1);
  CHECK(contains(deduplicated.left_out[0], "b16 h32/8 q1 k4096: its bucket r4 k4096 bhkv128 is "
                                           "timed already"));
}

TEST_CASE("autotune decode: shapes that do not run the decode kernels are refused before any GPU") {
  const Spec spec = test::spec_of(128, 128);
  DecodeTuneOptions o;
  o.heads_kv = 5;
  CHECK(contains(usage_error(spec, o), "--heads 32 must be a positive multiple of --heads-kv 5"));
  o = {};
  o.seqlen_q = 17;  // 68 packed rows
  CHECK(contains(usage_error(spec, o), "runs the forward kernel, not decode's"));
  CHECK(contains(usage_error(spec, o), "here 68"));
  o = {};
  o.seqlens_k = {100};
  CHECK(contains(usage_error(spec, o), "b1 h32/8 q1 k100"));
  o = {};
  o.batches.clear();
  CHECK(contains(usage_error(spec, o), "no decode shapes to tune"));
  Spec never = spec;
  never.decode = DecodeMode::Never;
  CHECK(contains(usage_error(never, DecodeTuneOptions{}), "runs the forward kernel"));
  // decode: always takes any row count.
  Spec always = spec;
  always.decode = DecodeMode::Always;
  o = {};
  o.seqlen_q = 17;
  CHECK(usage_error(always, o).empty());
}

TEST_CASE("autotune decode: the heuristic's count first, then a spread up to what the call allows") {
  CHECK(kv_split_candidates({32, 128}) ==
        std::vector<int>{32, 1, 2, 3, 4, 6, 8, 12, 16, 24, 48, 64, 96, 128});
  CHECK(kv_split_candidates({5, 10}) == std::vector<int>{5, 1, 2, 3, 4, 6, 8, 10});
  CHECK(kv_split_candidates({1, 1}) == std::vector<int>{1});
}

}  // namespace flashjit::tune
