// Decode against the fp64 reference (verify/decode_run.h): new query rows (1..64) against
// KV caches of ragged lengths (0 included, up to 65537), dense and paged (page sizes 1, 16,
// 256, pages shuffled), GQA ratios 1..32, head dims 64..512 and a qk != v pair, causal and
// sliding windows, outputs poisoned and cache rows past each length NaN. The tolerances are
// the forward's (verify/attention_run.cpp says why they catch a dropped key or split).
#include <doctest/doctest.h>

#include <cstdio>
#include <tuple>

#include <fmt/format.h>

#include "tests/gpu/gpu_grid.h"
#include "tests/gpu/gpu_runtime.h"
#include "verify/decode_run.h"

namespace flashjit::gpu_test {
namespace {

struct DecodeCase {
  Spec spec;
  verify::DecodeShape shape;
};

enum class Mask { None, Causal, Window };

Spec decode_spec(int dqk, int dv, DType dtype, Mask mask, int left = 256, int right = 0) {
  Spec spec = make_spec(dqk, dv, dtype, mask == Mask::Causal);
  if (mask == Mask::Window) {
    spec.mask = MaskKind::SlidingWindow;
    spec.window_left = left;
    spec.window_right = right;
    spec.name += fmt::format("_w{}_{}", left, right);
  }
  spec.validate();
  return spec;
}

verify::DecodeShape decode_shape(int heads_q, int heads_kv, int seqlen_q, std::vector<int> lengths,
                                 int page_size = 0) {
  verify::DecodeShape s;
  s.batch = static_cast<int>(lengths.size());
  s.heads_q = heads_q;
  s.heads_kv = heads_kv;
  s.seqlen_q = seqlen_q;
  s.seqlen_k = 1;
  for (int len : lengths) s.seqlen_k = std::max(s.seqlen_k, len);
  s.cache_seqlens = std::move(lengths);
  s.page_size = page_size;
  return s;
}

void check_cases(const std::vector<DecodeCase>& cases,
                 verify::Distribution distribution = verify::Distribution::Normal) {
  verify::RunOptions options;
  options.iters = 0;  // correctness only: bench/ times decode
  options.distribution = distribution;
  int failed = 0;
  for (const DecodeCase& c : cases) {
    const std::string what = fmt::format(
        "{} {} qk={} v={} {} | {}", to_string(c.spec.dtype), c.spec.causal ? "causal" : "full",
        c.spec.head_dim_qk, c.spec.head_dim_v,
        c.spec.mask == MaskKind::SlidingWindow
            ? fmt::format("window {}/{}", c.spec.window_left, c.spec.window_right)
            : "",
        verify::describe(c.shape));
    try {
      const verify::RunResult r = verify::run_decode(gpu_runtime(), c.spec, c.shape, options);
      fmt::print("{} | O abs {:.2e} l2 {:.2e} | LSE abs {:.2e} | {} | {}\n", what, r.o.max_abs,
                 r.o.rel_l2, r.lse.max_abs, r.kernel,
                 r.passed ? "ok" : fmt::format("FAIL (seed {}): {}", r.seed, r.failure));
      std::fflush(stdout);
      INFO(what, " seed ", r.seed, ": ", r.failure);
      CHECK(r.passed);
      failed += r.passed ? 0 : 1;
    } catch (const Error& error) {
      fmt::print("{} | ERROR {}: {}\n", what, to_string(error.kind()), error.what());
      std::fflush(stdout);
      FAIL_CHECK(what, ": ", to_string(error.kind()), " error: ", error.what());
      ++failed;
    }
  }
  fmt::print("-- {} of {} cases passed\n", cases.size() - failed, cases.size());
}

}  // namespace

TEST_CASE("decode: every head dim and GQA ratio, ragged dense caches") {
  std::vector<DecodeCase> cases;
  const std::pair<int, int> dims[] = {{64, 64}, {100, 100}, {128, 128}, {256, 256}, {512, 512},
                                      {192, 128}};
  const std::pair<int, int> heads[] = {{4, 4}, {8, 2}, {16, 2}, {32, 1}};
  int i = 0;
  for (auto [dqk, dv] : dims)
    for (auto [hq, hkv] : heads) {
      const DType dtype = i % 2 == 0 ? DType::BF16 : DType::F16;
      const Mask mask = i % 3 == 0 ? Mask::Causal : i % 3 == 1 ? Mask::None : Mask::Window;
      cases.push_back({decode_spec(dqk, dv, dtype, mask), decode_shape(hq, hkv, 1, {1000, 17, 0, 4097})});
      ++i;
    }
  // No cache_seqlens: a plain forward call that the runtime sends to decode.
  for (auto [dqk, dv] : dims) {
    verify::DecodeShape s = decode_shape(32, 8, 1, {4097, 4097});
    s.cache_seqlens.clear();
    cases.push_back({decode_spec(dqk, dv, DType::BF16, Mask::None), s});
  }
  check_cases(cases);
}

TEST_CASE("decode: seqlen_q 1 to 64 with causal masks and windows") {
  std::vector<DecodeCase> cases;
  const Spec specs[] = {
      decode_spec(128, 128, DType::BF16, Mask::None),
      decode_spec(128, 128, DType::BF16, Mask::Causal),
      decode_spec(100, 100, DType::F16, Mask::Causal),
      decode_spec(128, 128, DType::F16, Mask::Window, 64, 0),
      decode_spec(64, 64, DType::BF16, Mask::Window, 1000, 16),
  };
  for (const Spec& spec : specs)
    for (int sq : {1, 2, 5, 16, 64}) {
      cases.push_back({spec, decode_shape(8, 2, sq, {4097, 1000, 0})});
      // Fewer cached keys than new rows: under causal masking the first rows see none.
      cases.push_back({spec, decode_shape(32, 4, sq, {1, 17})});
    }
  check_cases(cases);
}

// Calls of up to 8 packed rows take the 8-row tile (the products transposed): every row count
// from 1 to 8, query rows of one head (causal and windows down the rows) and groups of 3 and
// 7, head dims of an odd number of k16 steps and V slices that pad, dense and paged.
TEST_CASE("decode: the 8-row tile at 1 to 8 packed rows") {
  std::vector<DecodeCase> cases;
  const Spec specs[] = {
      decode_spec(1, 1, DType::BF16, Mask::Causal),
      decode_spec(48, 48, DType::F16, Mask::None),
      decode_spec(100, 100, DType::BF16, Mask::Window, 100, 3),
      decode_spec(128, 128, DType::BF16, Mask::Causal),
      decode_spec(200, 72, DType::F16, Mask::Causal),
      decode_spec(256, 256, DType::BF16, Mask::Window, 253, 61),
      decode_spec(512, 512, DType::F16, Mask::Causal),
  };
  // (heads_q, heads_kv, seqlen_q): 1, 3, 5, 6, 7 and 8 packed rows.
  const std::tuple<int, int, int> rows[] = {{2, 2, 1}, {3, 1, 1}, {1, 1, 5},
                                            {6, 2, 2}, {7, 1, 1}, {4, 1, 2}};
  int i = 0;
  for (const Spec& spec : specs)
    for (auto [hq, hkv, sq] : rows) {
      const int page = i % 3 == 0 ? 16 : i % 3 == 1 ? 0 : 1;
      cases.push_back({spec, decode_shape(hq, hkv, sq, {4097, 17, 3, 1000}, page)});
      ++i;
    }
  check_cases(cases);
}

TEST_CASE("decode: paged caches of page size 1, 16 and 256") {
  std::vector<DecodeCase> cases;
  const Spec specs[] = {
      decode_spec(64, 64, DType::BF16, Mask::None),
      decode_spec(128, 128, DType::F16, Mask::Causal),
      decode_spec(256, 256, DType::BF16, Mask::Window, 300, 0),
      decode_spec(192, 128, DType::BF16, Mask::Causal),
  };
  for (const Spec& spec : specs)
    for (int page : {1, 16, 256}) {
      cases.push_back({spec, decode_shape(16, 2, 1, {1000, 0, 17, 4097}, page)});
      cases.push_back({spec, decode_shape(8, 8, 5, {4097, 1}, page)});
    }
  check_cases(cases);
}

TEST_CASE("decode: caches of 65537 keys") {
  std::vector<DecodeCase> cases = {
      {decode_spec(128, 128, DType::BF16, Mask::None), decode_shape(8, 1, 1, {65537, 3})},
      {decode_spec(128, 128, DType::BF16, Mask::Causal), decode_shape(8, 1, 2, {65537}, 256)},
      {decode_spec(64, 64, DType::F16, Mask::Causal), decode_shape(32, 1, 5, {65537}, 16)},
      {decode_spec(512, 512, DType::BF16, Mask::None), decode_shape(4, 4, 1, {65537}, 16)},
      {decode_spec(100, 100, DType::BF16, Mask::Window, 4096, 0), decode_shape(8, 2, 16, {65537, 4097})},
  };
  check_cases(cases);
}

// Scores of N(0, 81) after the scale: a row's running max moves past the kernel's slack (2^8
// in the exp2 domain) in the first tiles and by less than it later, so both the tiles that
// rescale O and those that skip it (P above 1) are checked, dense and paged, split and not.
TEST_CASE("decode: wide scores whose running max keeps rising") {
  std::vector<DecodeCase> cases;
  for (auto [dqk, dv] : {std::pair{64, 64}, {128, 128}, {256, 256}, {192, 128}})
    for (int page : {0, 16}) {
      cases.push_back({decode_spec(dqk, dv, DType::BF16, Mask::None),
                       decode_shape(32, 8, 1, {4097, 1000, 0, 65}, page)});
      cases.push_back({decode_spec(dqk, dv, DType::F16, Mask::Causal),
                       decode_shape(8, 2, 5, {4097, 17}, page)});
    }
  check_cases(cases, verify::Distribution::Wide);
}

TEST_CASE("merge: two halves of the keys merged in place equal one pass over all of them") {
  verify::RunOptions options;
  options.iters = 0;
  int failed = 0;
  struct MergeCase {
    Spec spec;
    verify::DecodeShape shape;
    int split_key;
  };
  const MergeCase cases[] = {
      {decode_spec(128, 128, DType::BF16, Mask::None), decode_shape(8, 2, 1, {4097, 4097}), 1000},
      {decode_spec(64, 64, DType::F16, Mask::None), decode_shape(4, 4, 300, {1037}), 17},
      {decode_spec(100, 100, DType::BF16, Mask::None), decode_shape(6, 3, 33, {2000, 2000}), 1999},
      {decode_spec(512, 512, DType::F16, Mask::None), decode_shape(2, 1, 5, {700}), 256},
      {decode_spec(192, 128, DType::BF16, Mask::None), decode_shape(4, 2, 128, {513}), 256},
  };
  for (MergeCase c : cases) {
    c.shape.cache_seqlens.clear();
    const std::string what = fmt::format("merge qk={} v={} {} | {} split at {}",
                                         c.spec.head_dim_qk, c.spec.head_dim_v,
                                         to_string(c.spec.dtype), verify::describe(c.shape),
                                         c.split_key);
    const verify::RunResult r =
        verify::run_merge(gpu_runtime(), c.spec, c.shape, c.split_key, options);
    fmt::print("{} | O abs {:.2e} l2 {:.2e} | LSE abs {:.2e} | {} | {}\n", what, r.o.max_abs,
               r.o.rel_l2, r.lse.max_abs, r.kernel,
               r.passed ? "ok" : fmt::format("FAIL (seed {}): {}", r.seed, r.failure));
    std::fflush(stdout);
    INFO(what, " seed ", r.seed, ": ", r.failure);
    CHECK(r.passed);
    failed += r.passed ? 0 : 1;
  }
  fmt::print("-- {} of {} cases passed\n", std::size(cases) - failed, std::size(cases));
}

}  // namespace flashjit::gpu_test
