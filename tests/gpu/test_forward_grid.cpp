// Forward pass against the fp64 reference over the grid of gpu_grid.h. Every case prints one
// line (spec, shape, errors), so the log reads as a table; a failing case says why.
#include <doctest/doctest.h>

#include <cstdio>

#include <fmt/format.h>

#include "tests/gpu/gpu_grid.h"
#include "tests/gpu/gpu_runtime.h"
#include "verify/attention_run.h"

namespace flashjit::gpu_test {

namespace {

enum class Kernel { Default, Sm80 };

// Checks every case, continuing past failures so one run reports all of them. Kernel::Sm80
// turns warp specialisation off, so that on a Hopper GPU the mma.sync kernel runs too.
void check_cases(std::vector<GridCase> cases, Kernel kernel = Kernel::Default) {
  verify::RunOptions options;
  options.iters = 0;  // correctness only; timing belongs to `flashjit run` and bench/
  int failed = 0;
  for (GridCase& c : cases) {
    if (kernel == Kernel::Sm80) c.spec.warp_specialization = false;
    const std::string what = describe(c);
    try {
      const verify::RunResult r = verify::run_attention(gpu_runtime(), c.spec, c.shape, options);
      fmt::print("{} | O abs {:.2e} rel {:.2e} l2 {:.2e} | LSE abs {:.2e} | {} | {}\n", what,
                 r.o.max_abs, r.o.max_rel, r.o.rel_l2, r.lse.max_abs, r.kernel,
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

TEST_CASE("forward: every head dim on small shapes (GQA, MQA, seqlen_q != seqlen_k, decode)") {
  check_cases(small_cases());
}

TEST_CASE("forward: seqlen 4097 against 4097, 1000 and 1") { check_cases(long_cases()); }

TEST_CASE("forward: padded head strides and packed QKV views") { check_cases(strided_cases()); }

TEST_CASE("forward: sliding windows") { check_cases(window_cases()); }

TEST_CASE("forward: block-sparse layouts") { check_cases(block_sparse_cases()); }

TEST_CASE("forward: compiled-in block patterns") { check_cases(pattern_cases()); }

TEST_CASE("forward: variable-length batches") { check_cases(varlen_cases()); }
// On Hopper the cases above run the warp-specialised kernel wherever TMA can load the
// tensors; these run the sm80 kernel on the same shapes.
TEST_CASE("forward, sm80 kernel: every head dim on small shapes") {
  check_cases(small_cases(), Kernel::Sm80);
}
TEST_CASE("forward, sm80 kernel: seqlen 4097") { check_cases(long_cases(), Kernel::Sm80); }
TEST_CASE("forward, sm80 kernel: sliding windows") { check_cases(window_cases(), Kernel::Sm80); }
TEST_CASE("forward, sm80 kernel: block-sparse layouts") {
  check_cases(block_sparse_cases(), Kernel::Sm80);
}
TEST_CASE("forward, sm80 kernel: compiled-in block patterns") {
  check_cases(pattern_cases(), Kernel::Sm80);
}
TEST_CASE("forward, sm80 kernel: variable-length batches") {
  check_cases(varlen_cases(), Kernel::Sm80);
}

}  // namespace flashjit::gpu_test
