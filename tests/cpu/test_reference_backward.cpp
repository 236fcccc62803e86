// The fp64 reference backward against central finite differences of the fp64 reference
// forward (the scalar sum(O ∘ dO), whose gradient is the backward's output), over every
// mask, GQA and varlen; and the low-precision replay close to it.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "verify/backward_run.h"
#include "verify/half.h"
#include "verify/reference_backward.h"

namespace flashjit::verify {

namespace {

TensorStrides packed(int seqlen, int heads, int dim) {
  return {.batch = int64_t{seqlen} * heads * dim, .seq = int64_t{heads} * dim, .head = dim};
}

bool varlen(const AttentionProblem& p) { return !p.cu_seqlens_q.empty(); }
int q_rows(const AttentionProblem& p) { return varlen(p) ? p.cu_seqlens_q.back() : p.seqlen_q; }
int k_rows(const AttentionProblem& p) { return varlen(p) ? p.cu_seqlens_k.back() : p.seqlen_k; }
int batches(const AttentionProblem& p) { return varlen(p) ? 1 : p.batch; }

// Contiguous Q, K, V, dO of a problem, N(0, 1) from a fixed seed.
struct Tensors {
  std::vector<float> q, k, v, d_o;
  Tensors(const AttentionProblem& p, uint64_t seed) {
    std::mt19937_64 engine(seed);
    std::normal_distribution<float> normal;
    const auto draw = [&](std::vector<float>& t, int64_t n) {
      t.resize(n);
      for (float& x : t) x = normal(engine);
    };
    const int64_t nq = int64_t{batches(p)} * q_rows(p), nk = int64_t{batches(p)} * k_rows(p);
    draw(q, nq * p.heads_q * p.head_dim_qk);
    draw(k, nk * p.heads_kv * p.head_dim_qk);
    draw(v, nk * p.heads_kv * p.head_dim_v);
    draw(d_o, nq * p.heads_q * p.head_dim_v);
  }
  HostView q_view(const AttentionProblem& p) const {
    return {q.data(), packed(q_rows(p), p.heads_q, p.head_dim_qk)};
  }
  HostView k_view(const AttentionProblem& p) const {
    return {k.data(), packed(k_rows(p), p.heads_kv, p.head_dim_qk)};
  }
  HostView v_view(const AttentionProblem& p) const {
    return {v.data(), packed(k_rows(p), p.heads_kv, p.head_dim_v)};
  }
  HostView d_o_view(const AttentionProblem& p) const {
    return {d_o.data(), packed(q_rows(p), p.heads_q, p.head_dim_v)};
  }
};

ReferenceGradients backward(const AttentionProblem& p, const Tensors& t, int threads = 0) {
  return reference_backward(p, t.q_view(p), t.k_view(p), t.v_view(p), t.d_o_view(p), threads);
}

double loss(const AttentionProblem& p, const Tensors& t) {
  const ReferenceOutput out = reference_forward(p, t.q_view(p), t.k_view(p), t.v_view(p), 1);
  double sum = 0;
  for (size_t e = 0; e < out.o.size(); ++e) sum += out.o[e] * t.d_o[e];
  return sum;
}

// Every element of dQ, dK and dV against (loss(x + h) - loss(x - h)) / 2h. h = 2^-10 is
// exact in float next to N(0, 1) values; the truncation error (h² times a third derivative
// of O(1)) stays near 1e-6.
void check_against_finite_differences(const AttentionProblem& p, uint64_t seed = 1) {
  Tensors t(p, seed);
  const ReferenceGradients want = backward(p, t);
  constexpr float kStep = 1.0f / 1024;
  const auto check = [&](std::vector<float>& input, const std::vector<double>& grad,
                         const char* name) {
    REQUIRE(grad.size() == input.size());
    for (size_t e = 0; e < input.size(); ++e) {
      const float x = input[e];
      input[e] = x + kStep;
      const double up = loss(p, t);
      input[e] = x - kStep;
      const double down = loss(p, t);
      input[e] = x;
      const double numeric = (up - down) / (2.0 * kStep);
      INFO(name << "[" << e << "]");
      CHECK(grad[e] == doctest::Approx(numeric).epsilon(1e-4).scale(0.1));
    }
  };
  check(t.q, want.dq, "dq");
  check(t.k, want.dk, "dk");
  check(t.v, want.dv, "dv");
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::abs(e));
  return m;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t e = 0; e < a.size(); ++e) m = std::max(m, std::abs(a[e] - b[e]));
  return m;
}

}  // namespace

TEST_CASE("reference backward: matches finite differences without a mask, seqlen_q != seqlen_k") {
  AttentionProblem p;
  p.batch = 2;
  p.heads_q = 2;
  p.heads_kv = 2;
  p.seqlen_q = 3;
  p.seqlen_k = 5;
  p.head_dim_qk = 4;
  p.head_dim_v = 3;
  check_against_finite_differences(p);
  p.softmax_scale = 0.7;
  check_against_finite_differences(p, 2);
}

TEST_CASE("reference backward: causal, with rows that see no key") {
  AttentionProblem p;
  p.causal = true;
  p.seqlen_q = 6;
  p.seqlen_k = 4;  // rows 0 and 1 see nothing
  p.head_dim_qk = 3;
  p.head_dim_v = 2;
  check_against_finite_differences(p);
  Tensors t(p, 3);
  const ReferenceGradients g = backward(p, t);
  for (int i = 0; i < 2; ++i)
    for (int d = 0; d < 3; ++d) CHECK(g.dq[i * 3 + d] == 0.0);
}

TEST_CASE("reference backward: sliding window") {
  AttentionProblem p;
  p.seqlen_q = 5;
  p.seqlen_k = 7;
  p.window = true;
  p.window_left = 1;
  p.window_right = 0;
  p.head_dim_qk = 3;
  p.head_dim_v = 3;
  check_against_finite_differences(p);
}

TEST_CASE("reference backward: block mask, per-head, with a query block that sees nothing") {
  AttentionProblem p;
  p.heads_q = 2;
  p.heads_kv = 1;
  p.seqlen_q = 4;
  p.seqlen_k = 6;
  p.head_dim_qk = 2;
  p.head_dim_v = 3;
  p.block_q = 2;
  p.block_k = 2;
  p.q_blocks = 2;
  p.k_blocks = 3;
  p.block_heads = 2;
  p.block_visible = {1, 0, 1,  0, 0, 0,    // head 0: query block 1 sees nothing
                     0, 1, 1,  1, 1, 0};   // head 1
  check_against_finite_differences(p);
}

TEST_CASE("reference backward: GQA sums dK / dV over the group's query heads") {
  AttentionProblem p;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.seqlen_q = 3;
  p.seqlen_k = 4;
  p.head_dim_qk = 3;
  p.head_dim_v = 2;
  p.causal = true;
  check_against_finite_differences(p);
}

TEST_CASE("reference backward: varlen, with an empty query and an empty key sequence") {
  AttentionProblem p;
  p.batch = 4;
  p.heads_q = 2;
  p.heads_kv = 1;
  p.head_dim_qk = 3;
  p.head_dim_v = 2;
  p.causal = true;
  p.cu_seqlens_q = {0, 3, 3, 5, 7};  // sequence 1 has no queries
  p.cu_seqlens_k = {0, 4, 6, 6, 9};  // sequence 2 has no keys
  p.seqlen_q = 3;
  p.seqlen_k = 4;
  check_against_finite_differences(p);
  Tensors t(p, 4);
  const ReferenceGradients g = backward(p, t);
  for (int e = 4 * 1 * 3; e < 6 * 1 * 3; ++e) CHECK(g.dk[e] == 0.0);  // keys nobody asks
  for (int e = 3 * 2 * 3; e < 5 * 2 * 3; ++e) CHECK(g.dq[e] == 0.0);  // rows with no keys
}

TEST_CASE("reference backward: strided views and any thread count give the same result") {
  AttentionProblem p;
  p.batch = 2;
  p.heads_q = 3;
  p.heads_kv = 1;
  p.seqlen_q = 70;  // more than one block of rows and of keys per head
  p.seqlen_k = 45;
  p.head_dim_qk = 5;
  p.head_dim_v = 4;
  p.causal = true;
  const Tensors t(p, 5);
  const ReferenceGradients one_thread = backward(p, t, 1);
  const ReferenceGradients many = backward(p, t, 7);
  CHECK(one_thread.dq == many.dq);
  CHECK(one_thread.dk == many.dk);
  CHECK(one_thread.dv == many.dv);
  CHECK(max_abs(one_thread.dk) > 0);

  // dO with each head row padded to 8 elements: NaN padding must never be read.
  const int pad = 8;
  std::vector<float> d_o_padded(2 * 70 * 3 * pad, std::numeric_limits<float>::quiet_NaN());
  for (int r = 0; r < 2 * 70 * 3; ++r)
    for (int c = 0; c < 4; ++c) d_o_padded[r * pad + c] = t.d_o[r * 4 + c];
  const ReferenceGradients strided =
      reference_backward(p, t.q_view(p), t.k_view(p), t.v_view(p),
                         {d_o_padded.data(), packed(70, 3, pad)}, 3);
  CHECK(strided.dq == one_thread.dq);
  CHECK(strided.dk == one_thread.dk);
  CHECK(strided.dv == one_thread.dv);
}

TEST_CASE("lowp backward: within a few ulps of the dtype of the fp64 reference, never equal") {
  AttentionProblem p;
  p.batch = 1;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.seqlen_q = 40;
  p.seqlen_k = 50;
  p.head_dim_qk = 16;
  p.head_dim_v = 24;
  p.causal = true;
  Tensors t(p, 6);
  for (auto* x : {&t.q, &t.k, &t.v, &t.d_o})
    for (float& e : *x) e = round_to(DType::BF16, e);  // what the GPU run feeds both
  const ReferenceGradients exact = backward(p, t);
  const auto lowp = [&](DType dtype) {
    return lowp_backward(p, t.q_view(p), t.k_view(p), t.v_view(p), t.d_o_view(p), dtype);
  };
  const ReferenceGradients bf16 = lowp(DType::BF16), fp16 = lowp(DType::F16);
  const auto check = [](const std::vector<double>& got, const std::vector<double>& want,
                        double ulp, const char* name) {
    INFO(name);
    const double error = max_diff(got, want), scale = max_abs(want);
    CHECK(error > 0);                  // it does round
    CHECK(error < 8 * ulp * scale);    // but like a correct low-precision computation
    return error;
  };
  const double bf16_ulp = std::ldexp(1.0, -8), fp16_ulp = std::ldexp(1.0, -11);
  CHECK(check(fp16.dq, exact.dq, fp16_ulp, "fp16 dq") < check(bf16.dq, exact.dq, bf16_ulp, "bf16 dq"));
  CHECK(check(fp16.dk, exact.dk, fp16_ulp, "fp16 dk") < check(bf16.dk, exact.dk, bf16_ulp, "bf16 dk"));
  CHECK(check(fp16.dv, exact.dv, fp16_ulp, "fp16 dv") < check(bf16.dv, exact.dv, bf16_ulp, "bf16 dv"));
  // Where dS does not vanish the cancellation term is a few percent of the fp16 error.
  CHECK(exact.dq_cancellation > 0);
  CHECK(exact.dq_cancellation < 0.05 * max_diff(fp16.dq, exact.dq));
  CHECK(exact.dk_cancellation < 0.05 * max_diff(fp16.dk, exact.dk));
}

TEST_CASE("reference backward: one key per row: dS = 0, and the cancellation term bounds fp32") {
  AttentionProblem p;
  p.seqlen_q = 17;
  p.seqlen_k = 1;
  p.head_dim_qk = 64;
  p.head_dim_v = 512;
  Tensors t(p, 7);
  const ReferenceGradients g = backward(p, t);
  CHECK(max_abs(g.dq) == 0.0);  // P = 1: dP - D = 0 exactly
  CHECK(max_abs(g.dk) == 0.0);
  // A kernel computes D = rowsum(dO ∘ O) apart from dP = dO Vᵀ, in fp32 and another order
  // (here: backwards), so its dS, dQ and dK are not 0; the cancellation term covers them.
  const int dv = p.head_dim_v, dqk = p.head_dim_qk;
  const float scale = 1.0f / 8;
  std::vector<float> ds(p.seqlen_q);
  for (int i = 0; i < p.seqlen_q; ++i) {
    float dp = 0, d = 0;
    for (int c = 0; c < dv; ++c) dp += t.d_o[i * dv + c] * t.v[c];
    for (int c = dv - 1; c >= 0; --c) d += t.d_o[i * dv + c] * t.v[c];
    ds[i] = dp - d;
  }
  double dq_error = 0, dk_error = 0;
  for (int x = 0; x < dqk; ++x) {
    float dk = 0;
    for (int i = 0; i < p.seqlen_q; ++i) {
      dq_error = std::max(dq_error, std::abs(double{scale * ds[i] * t.k[x]}));
      dk += scale * ds[i] * t.q[i * dqk + x];
    }
    dk_error = std::max(dk_error, std::abs(double{dk}));
  }
  CHECK(dq_error > 0);
  CHECK(dq_error <= g.dq_cancellation);
  CHECK(dk_error <= g.dk_cancellation);
  // Its closed form for one key: 2^-23 scale max ‖dO_i‖ 2 ‖V‖ max |K|.
  double v_norm = 0, k_max = 0, d_o_norm = 0;
  for (int c = 0; c < dv; ++c) v_norm += double{t.v[c]} * t.v[c];
  for (int x = 0; x < dqk; ++x) k_max = std::max(k_max, std::abs(double{t.k[x]}));
  for (int i = 0; i < p.seqlen_q; ++i) {
    double norm = 0;
    for (int c = 0; c < dv; ++c) norm += double{t.d_o[i * dv + c]} * t.d_o[i * dv + c];
    d_o_norm = std::max(d_o_norm, std::sqrt(norm));
  }
  CHECK(g.dq_cancellation == doctest::Approx(std::ldexp(1.0, -23) / 8 *
                                             d_o_norm * 2 * std::sqrt(v_norm) * k_max));
}

namespace {

// A bf16 kernel's gradients replayed on a head-dim-1 problem with heads_kv 1: P in fp32 from the
// exact LSE, D from O rounded to bf16, dS = P (dP - D); P and dS rounded to bf16 before the
// products, which sum in fp32; dQ and dK scaled, and every gradient rounded to bf16.
struct Replay {
  std::vector<double> dq, dk, dv;
  double d_error = 0;  // u max_i |dO_i O_i|: what reading O in bf16 can do to D (run_backward's)
};
Replay replay_d1_kernel(const AttentionProblem& p, const Tensors& t) {
  const auto bf = [](double x) { return round_to(DType::BF16, static_cast<float>(x)); };
  const ReferenceOutput fwd = reference_forward(p, t.q_view(p), t.k_view(p), t.v_view(p), 1);
  const int hq = p.heads_q, sq = p.seqlen_q, sk = p.seqlen_k;
  const float scale = static_cast<float>(p.scale());
  std::vector<float> dq(static_cast<size_t>(sq) * hq, 0.f), dk(sk, 0.f), dv(sk, 0.f);
  Replay r;
  for (int h = 0; h < hq; ++h)
    for (int i = 0; i < sq; ++i) {
      const size_t row = static_cast<size_t>(i) * hq + h;
      const float d = t.d_o[row] * bf(fwd.o[row]);
      r.d_error = std::max(r.d_error, std::ldexp(std::abs(double{d}), -8));
      const float lse = static_cast<float>(fwd.lse[static_cast<size_t>(h) * sq + i]);
      for (int j = p.first_key(i); j < p.end_key(i); ++j) {
        const float prob = std::exp(t.q[row] * t.k[j] * scale - lse);
        const float ds = bf(prob * (t.d_o[row] * t.v[j] - d));
        dv[j] += bf(prob) * t.d_o[row];
        dk[j] += ds * t.q[row];
        dq[row] += ds * t.k[j];
      }
    }
  for (float x : dq) r.dq.push_back(bf(x * scale));
  for (float x : dk) r.dk.push_back(bf(x * scale));
  for (float x : dv) r.dv.push_back(bf(x));
  return r;
}

}  // namespace

TEST_CASE("reference backward: rounding spreads, and the floor they put under the gradient bound") {
  // One key: P = 1 and dS = 0 everywhere, so dV's spread is the largest column norm of dO.
  AttentionProblem one;
  one.seqlen_q = 9;
  one.head_dim_qk = one.head_dim_v = 3;
  const Tensors t1(one, 5);
  double want = 0;
  for (int d = 0; d < 3; ++d) {
    double sum = 0;
    for (int i = 0; i < 9; ++i) sum += double{t1.d_o[i * 3 + d]} * t1.d_o[i * 3 + d];
    want = std::max(want, std::sqrt(sum));
  }
  const ReferenceGradients g1 = backward(one, t1);
  CHECK(g1.dv_rounding_spread == doctest::Approx(want));
  CHECK(g1.dq_rounding_spread == 0.0);
  CHECK(g1.dk_rounding_spread == 0.0);

  // Head dim 1, where a tensor has a few elements: 128 queries against 17 keys, causal (dV's
  // 17 elements; the GPU's failures of entry 42), and 1 query against 17 keys (dQ's 2).
  // Without the floor, 2 x the low-precision error alone failed about 1% of these; with it,
  // none may.
  AttentionProblem causal, one_row;
  causal.heads_q = 3;
  causal.seqlen_q = 128;
  causal.seqlen_k = 17;
  causal.causal = true;
  one_row.heads_q = 2;
  one_row.seqlen_k = 17;
  int beyond_lowp = 0;
  for (const AttentionProblem* p : {&causal, &one_row})
    for (uint64_t seed = 1; seed <= 200; ++seed) {
      Tensors t(*p, seed);
      for (auto* x : {&t.q, &t.k, &t.v, &t.d_o})
        for (float& e : *x) e = round_to(DType::BF16, e);
      const ReferenceGradients exact = backward(*p, t);
      const ReferenceGradients lowp =
          lowp_backward(*p, t.q_view(*p), t.k_view(*p), t.v_view(*p), t.d_o_view(*p), DType::BF16);
      const Replay got = replay_d1_kernel(*p, t);
      // The bounds as run_backward makes them: dQ's and dK's also carry D's rounding.
      double k_max = 0;
      for (float x : t.k) k_max = std::max(k_max, double{std::abs(x)});
      const auto check = [&](const std::vector<double>& g, const std::vector<double>& r,
                             const std::vector<double>& l, double cancellation, double d_term,
                             double spread) {
        const double error = max_diff(g, r);
        beyond_lowp += error > gradient_error_bound(r, l, cancellation) + d_term ? 1 : 0;
        return error <= gradient_error_bound(r, l, cancellation,
                                             rounding_floor(spread, DType::BF16)) + d_term;
      };
      INFO("seqlen_q " << p->seqlen_q << " seed " << seed);
      CHECK(check(got.dv, exact.dv, lowp.dv, 0, 0, exact.dv_rounding_spread));
      CHECK(check(got.dk, exact.dk, lowp.dk, exact.dk_cancellation,
                  2 * got.d_error * exact.max_p_q_column, exact.dk_rounding_spread));
      CHECK(check(got.dq, exact.dq, lowp.dq, exact.dq_cancellation,
                  2 * got.d_error * p->scale() * k_max, exact.dq_rounding_spread));
    }
  MESSAGE(beyond_lowp << " of 1200 replayed gradients beyond 2 x the low-precision error alone");
}

}  // namespace flashjit::verify
