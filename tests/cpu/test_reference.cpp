// The fp64 reference against hand-computed cases: it is the yardstick of every GPU test,
// so its masking, GQA mapping and empty-row conventions are pinned down here.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "verify/reference.h"

namespace flashjit::verify {

namespace {

// Contiguous strides of a [batch, seqlen, heads, dim] tensor.
TensorStrides packed(int seqlen, int heads, int dim) {
  return {.batch = int64_t{seqlen} * heads * dim, .seq = int64_t{heads} * dim, .head = dim};
}

struct Tensors {
  std::vector<float> q, k, v;
};

ReferenceOutput run(const AttentionProblem& p, const Tensors& t, int threads = 0) {
  return reference_forward(p, {t.q.data(), packed(p.seqlen_q, p.heads_q, p.head_dim_qk)},
                           {t.k.data(), packed(p.seqlen_k, p.heads_kv, p.head_dim_qk)},
                           {t.v.data(), packed(p.seqlen_k, p.heads_kv, p.head_dim_v)}, threads);
}

}  // namespace

TEST_CASE("reference: a single key gives O = its V row and LSE = its scaled score") {
  AttentionProblem p;
  p.seqlen_q = 2;
  p.seqlen_k = 1;
  p.head_dim_qk = 4;
  p.head_dim_v = 3;
  const Tensors t{.q = {1, 2, 3, 4, -1, 0, 0.5f, 2}, .k = {0.5f, -1, 1, 2}, .v = {7, -3, 0.25f}};
  const ReferenceOutput out = run(p, t);
  for (int i = 0; i < 2; ++i) {
    for (int c = 0; c < 3; ++c) CHECK(out.o[i * 3 + c] == doctest::Approx(t.v[c]));
    double dot = 0;
    for (int d = 0; d < 4; ++d) dot += t.q[i * 4 + d] * t.k[d];
    CHECK(out.lse[i] == doctest::Approx(dot / 2.0));  // default scale 1/sqrt(4)
  }
}

TEST_CASE("reference: two keys by hand, explicit scale") {
  AttentionProblem p;
  p.seqlen_k = 2;
  p.head_dim_qk = 2;
  p.head_dim_v = 1;
  p.softmax_scale = 1.0;
  const Tensors t{.q = {1, 0}, .k = {1, 0, 0, 1}, .v = {10, 20}};
  const ReferenceOutput out = run(p, t);
  const double e = std::exp(1.0);
  CHECK(out.o[0] == doctest::Approx((e * 10 + 20) / (e + 1)));
  CHECK(out.lse[0] == doctest::Approx(std::log(e + 1)));
}

TEST_CASE("reference: causal is bottom-right aligned; a row that sees no key is 0 and -inf") {
  AttentionProblem p;
  p.causal = true;
  p.seqlen_q = 3;
  p.seqlen_k = 1;
  CHECK(p.visible_keys(0) == 0);
  CHECK(p.visible_keys(1) == 0);
  CHECK(p.visible_keys(2) == 1);
  const Tensors t{.q = {1, 1, 1}, .k = {2}, .v = {5}};
  const ReferenceOutput out = run(p, t);
  for (int i = 0; i < 2; ++i) {
    CHECK(out.o[i] == 0.0);
    CHECK(out.lse[i] == -std::numeric_limits<double>::infinity());
  }
  CHECK(out.o[2] == doctest::Approx(5));
  CHECK(out.lse[2] == doctest::Approx(2));

  AttentionProblem tall = p;  // a whole block of rows that sees no key, then one that does
  tall.seqlen_q = 40;
  const Tensors t40{.q = std::vector<float>(40, 1.f), .k = {2}, .v = {5}};
  const ReferenceOutput tall_out = run(tall, t40);
  CHECK(tall_out.lse[38] == -std::numeric_limits<double>::infinity());
  CHECK(tall_out.o[38] == 0.0);
  CHECK(tall_out.o[39] == doctest::Approx(5));

  AttentionProblem wide = p;  // seqlen_q < seqlen_k: query i sees keys 0..i + 2
  wide.seqlen_q = 2;
  wide.seqlen_k = 4;
  CHECK(wide.visible_keys(0) == 3);
  CHECK(wide.visible_keys(1) == 4);
}

TEST_CASE("reference: causal masking changes only what the mask says") {
  AttentionProblem p;
  p.causal = true;
  p.seqlen_q = 2;
  p.seqlen_k = 2;
  p.softmax_scale = 1.0;
  // Row 0 sees key 0 only (O = v0); row 1 sees both keys with equal scores (O = mean).
  const Tensors t{.q = {0, 0}, .k = {3, -3}, .v = {1, 3}};
  const ReferenceOutput out = run(p, t);
  CHECK(out.o[0] == doctest::Approx(1));
  CHECK(out.o[1] == doctest::Approx(2));
  CHECK(out.lse[0] == doctest::Approx(0));
  CHECK(out.lse[1] == doctest::Approx(std::log(2.0)));
}

TEST_CASE("reference: GQA maps query head h to kv head h / (heads_q / heads_kv)") {
  AttentionProblem p;
  p.heads_q = 4;
  p.heads_kv = 2;
  const Tensors t{.q = {1, 1, 1, 1}, .k = {0, 0}, .v = {100, 200}};
  const ReferenceOutput out = run(p, t);
  CHECK(out.o == std::vector<double>{100, 100, 200, 200});
}

TEST_CASE("reference: strided views and any thread count give the same result") {
  AttentionProblem p;
  p.batch = 2;
  p.heads_q = 3;
  p.heads_kv = 1;
  p.seqlen_q = 70;  // more than one block of rows per task
  p.seqlen_k = 33;
  p.head_dim_qk = 5;
  p.head_dim_v = 4;
  p.causal = true;
  Tensors t;
  const auto fill = [](std::vector<float>& v, size_t n, int salt) {
    for (size_t e = 0; e < n; ++e) v.push_back(std::sin(0.37f * e + salt));
  };
  fill(t.q, 2 * 70 * 3 * 5, 1);
  fill(t.k, 2 * 33 * 1 * 5, 2);
  fill(t.v, 2 * 33 * 1 * 4, 3);
  const ReferenceOutput one_thread = run(p, t, 1);
  const ReferenceOutput many = run(p, t, 7);
  CHECK(one_thread.o == many.o);
  CHECK(one_thread.lse == many.lse);

  // Q with each head row padded to 8 elements (NaN padding must never be read).
  const int pad_dim = 8;
  std::vector<float> q_padded(2 * 70 * 3 * pad_dim, std::numeric_limits<float>::quiet_NaN());
  for (int r = 0; r < 2 * 70 * 3; ++r)
    for (int d = 0; d < 5; ++d) q_padded[r * pad_dim + d] = t.q[r * 5 + d];
  const ReferenceOutput strided = reference_forward(
      p, {q_padded.data(), packed(70, 3, pad_dim)}, {t.k.data(), packed(33, 1, 5)},
      {t.v.data(), packed(33, 1, 4)});
  CHECK(strided.o == one_thread.o);
  CHECK(strided.lse == one_thread.lse);
}

TEST_CASE("reference: a sliding window sees keys i+d-left .. i+d+right, no more") {
  AttentionProblem p;
  p.seqlen_q = 5;
  p.seqlen_k = 9;  // d = 4
  p.window = true;
  p.window_left = 2;
  p.window_right = 1;
  CHECK(p.first_key(0) == 2);
  CHECK(p.end_key(0) == 6);
  CHECK(p.first_key(4) == 6);
  CHECK(p.end_key(4) == 9);  // clipped at seqlen_k
  p.causal = true;           // right of the diagonal hidden as well
  p.window_right = 0;
  CHECK(p.end_key(0) == 5);
  AttentionProblem empty = p;  // seqlen_q > seqlen_k: the top rows see nothing
  empty.seqlen_q = 9;
  empty.seqlen_k = 3;
  CHECK(empty.visible_keys(0) == 0);
  CHECK(empty.visible_keys(6) == 1);

  // O of a window row is the softmax-weighted mean over exactly its keys.
  AttentionProblem one;
  one.seqlen_q = 1;
  one.seqlen_k = 6;  // d = 5: the row sees keys 3..5 with left 2
  one.window = true;
  one.window_left = 2;
  one.softmax_scale = 1.0;
  const Tensors t{.q = {0}, .k = {0, 0, 0, 0, 0, 0}, .v = {100, 100, 100, 1, 2, 3}};
  const ReferenceOutput out = reference_forward(
      one, {t.q.data(), {6, 1, 1}}, {t.k.data(), {6, 1, 1}}, {t.v.data(), {6, 1, 1}});
  CHECK(out.o[0] == doctest::Approx(2.0));
  CHECK(out.lse[0] == doctest::Approx(std::log(3.0)));
}

}  // namespace flashjit::verify
