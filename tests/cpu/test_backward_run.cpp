// The checked backward run's pieces that need no GPU: FlashAttention's gradient bound, the
// FLOP count, and the shape checks that come before any device call.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "verify/backward_run.h"

namespace flashjit::verify {

TEST_CASE("gradient bound: twice the low-precision error plus twice the fp32 rounding") {
  // R = 0.5 is exact in fp32 and stays so through + 0.3 - 0.3: only the low-precision error.
  CHECK(gradient_error_bound(std::vector<double>{0.5, -0.25}, std::vector<double>{0.5, -0.25 + 1e-3}) ==
        doctest::Approx(2e-3));
  // R = 1.1: in fp32, 1.1 + 0.3 - 0.3 lands one ulp (2^-23) off, so the bound is not zero
  // where L is exact.
  CHECK(gradient_error_bound(std::vector<double>{1.1}, std::vector<double>{1.1}) ==
        2 * std::ldexp(1.0, -23));
  // The cancellation term adds twice itself.
  CHECK(gradient_error_bound(std::vector<double>{0.5}, std::vector<double>{0.5}, 1e-6) ==
        doctest::Approx(2e-6));
  CHECK_THROWS(gradient_error_bound(std::vector<double>{1.0}, std::vector<double>{}));
}

TEST_CASE("backward run: 2.5 x the forward FLOPs; bad shapes fail before the GPU") {
  const Spec spec = Spec::from_yaml("head_dim: 64\ncausal: true\n");
  Shape shape;
  shape.batch = 2;
  shape.heads_q = shape.heads_kv = 3;
  shape.seqlen_q = shape.seqlen_k = 100;
  CHECK(backward_flops(spec, shape) == doctest::Approx(2.5 * forward_flops(spec, shape)));

  // What run_backward throws; the checks below must throw Shape, not NoDevice, on a machine
  // without a GPU.
  Runtime runtime;
  const auto failure = [&](const Shape& s, const UserInputs* inputs) -> std::string {
    try {
      run_backward(runtime, spec, s, {}, inputs);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Shape);
      return e.what();
    }
    return "";
  };
  Shape bad = shape;
  bad.heads_kv = 2;  // 3 query heads do not split into 2 groups
  CHECK(failure(bad, nullptr).find("multiple of heads_kv") != std::string::npos);
  UserInputs inputs;  // q, k, v that fit, but no dO
  inputs.q.resize(2 * 100 * 3 * 64);
  inputs.k = inputs.v = inputs.q;
  CHECK(failure(shape, &inputs).find("d_o holds 0 values") != std::string::npos);
}

TEST_CASE("gradient bound: a floor under the low-precision error") {
  CHECK(gradient_error_bound(std::vector<double>{0.5}, std::vector<double>{0.5 + 1e-3}, 0, 4e-3) ==
        doctest::Approx(8e-3));
  CHECK(gradient_error_bound(std::vector<double>{0.5}, std::vector<double>{0.5 + 1e-3}, 0, 1e-4) ==
        doctest::Approx(2e-3));
  // 3 u / sqrt(3) times the spread: u = 2^-8 for bf16, 2^-11 for fp16.
  CHECK(rounding_floor(2.0, DType::BF16) == doctest::Approx(std::sqrt(3.0) * 2 / 256));
  CHECK(rounding_floor(2.0, DType::F16) == doctest::Approx(std::sqrt(3.0) * 2 / 2048));
}

}  // namespace flashjit::verify
