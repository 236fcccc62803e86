// Backward pass against the fp64 reference over the grid of gpu_grid.h, under
// FlashAttention's gradient rule (verify/backward_run.h states it: max |G - R| <= 2 x the
// error of the same computation in the low dtype + 2 x the fp32 rounding of R, per tensor,
// with no NaN and no write outside dQ, dK, dV). Every case prints one line (spec, shape, each
// gradient's error against its bound), so the log reads as a table; a failing case says why.
#include <doctest/doctest.h>

#include <cstdio>

#include <fmt/format.h>

#include "tests/gpu/gpu_grid.h"
#include "tests/gpu/gpu_runtime.h"
#include "verify/backward_run.h"

namespace flashjit::gpu_test {

namespace {

enum class Mode { Default, Deterministic, Sm80 };

// Checks every case, continuing past failures so one run reports all of them.
// Mode::Deterministic sets backward.deterministic (on sm_90a the ordered dK/dV/dQ kernel up to
// d128, the separate dQ kernel past it); Mode::Sm80 turns
// warp specialisation off (the mma.sync kernels, which odd head dims reach on the H200 only
// this way since the runtime stages their rows for TMA); deterministic_runs > 1 runs each
// backward that often and requires bitwise-equal gradients.
void check_cases(std::vector<GridCase> cases, int deterministic_runs = 0,
                 Mode mode = Mode::Default) {
  verify::BackwardRunOptions options;
  options.run.iters = 0;  // correctness only; timing belongs to `flashjit run` and bench/
  options.deterministic_runs = deterministic_runs;
  int failed = 0;
  for (GridCase& c : cases) {
    if (mode == Mode::Deterministic) c.spec.deterministic = true;
    if (mode == Mode::Sm80) c.spec.warp_specialization = false;
    const std::string what = describe(c);
    try {
      const verify::BackwardRunResult r =
          verify::run_backward(gpu_runtime(), c.spec, c.shape, options);
      fmt::print("{} | dQ {:.2e}/{:.2e} dK {:.2e}/{:.2e} dV {:.2e}/{:.2e}{} | {} | {}\n", what,
                 r.dq.max_abs, r.dq_bound, r.dk.max_abs, r.dk_bound, r.dv.max_abs, r.dv_bound,
                 r.deterministic_checked ? fmt::format(" | {} runs equal", deterministic_runs) : "",
                 r.kernels, r.passed ? "ok" : fmt::format("FAIL (seed {}): {}", r.seed, r.failure));
      std::fflush(stdout);
      INFO(what, " seed ", r.seed, ": ", r.failure);
      CHECK(r.passed);
      CHECK(r.deterministic_checked == (deterministic_runs > 1));
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

// long_cases() without the non-causal 4097 x 4097 ones above head dim 128: their fp64 and
// low-precision references take most of the suite's CPU time, and the causal spec of the
// same dims still runs 4097 x 4097.
std::vector<GridCase> long_backward_cases() {
  std::vector<GridCase> cases;
  for (GridCase& c : long_cases()) {
    const bool full_square = c.shape.seqlen_q == 4097 && c.shape.seqlen_k == 4097;
    if (full_square && !c.spec.causal && c.spec.head_dim_qk > 128) continue;
    cases.push_back(std::move(c));
  }
  return cases;
}

// The small cases of a few head dims (the usual ones, odd ones, the widest each kernel
// family serves, qk != v), the windows of up to 1000 rows (bands edged inside key blocks for
// the ordered dK/dV/dQ kernel's turns) and the variable-length batches: what the determinism
// check repeats.
std::vector<GridCase> deterministic_cases() {
  std::vector<GridCase> cases;
  for (GridCase& c : small_cases())
    for (const auto& [dqk, dv] : {std::pair{64, 64}, {72, 72}, {100, 100}, {128, 128},
                                  {192, 192}, {256, 256}, {320, 320}, {512, 512}, {192, 128}})
      if (c.spec.head_dim_qk == dqk && c.spec.head_dim_v == dv) cases.push_back(c);
  for (GridCase& c : window_cases())
    if (c.shape.seqlen_q <= 1000) cases.push_back(std::move(c));
  for (GridCase& c : varlen_cases()) cases.push_back(std::move(c));
  return cases;
}

}  // namespace

TEST_CASE("backward: every head dim on small shapes (GQA, MQA, seqlen_q != seqlen_k, decode)") {
  check_cases(small_cases());
}

TEST_CASE("backward: seqlen 4097 against 4097, 1000 and 1") { check_cases(long_backward_cases()); }

TEST_CASE("backward: padded head strides and packed QKV views") { check_cases(strided_cases()); }

TEST_CASE("backward: sliding windows") { check_cases(window_cases()); }

TEST_CASE("backward: block-sparse layouts") { check_cases(block_sparse_cases()); }

TEST_CASE("backward: compiled-in block patterns") { check_cases(pattern_cases()); }

TEST_CASE("backward: variable-length batches") { check_cases(varlen_cases()); }

TEST_CASE("backward, sm80 kernels: every head dim on small shapes") {
  check_cases(small_cases(), 0, Mode::Sm80);
}

// The deterministic kernels at every head dim: the ordered dK/dV/dQ kernel where the dQ
// variants serve, the two kernels' own tiles past them (48 to 128 keys a dQ step). The
// windows' shapes of up to 300 rows: the larger ones are the default mode's case (their
// references take minutes; this case runs in about two).
TEST_CASE("backward, deterministic: every head dim on small shapes, and windows") {
  std::vector<GridCase> cases = small_cases();
  for (GridCase& c : window_cases())
    if (c.shape.seqlen_q <= 300) cases.push_back(std::move(c));
  check_cases(std::move(cases), 0, Mode::Deterministic);
}

TEST_CASE("backward, deterministic: three runs bitwise equal") {
  check_cases(deterministic_cases(), 3, Mode::Deterministic);
}

}  // namespace flashjit::gpu_test
