#include "verify/reference_backward.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "verify/dense_math.h"
#include "verify/half.h"

namespace flashjit::verify {

namespace {

// Like FlashAttention's backward, dQ is computed per block of query rows (each row needs
// every key it sees) and dK / dV per block of keys (each key needs every row that sees it);
// the second walk recomputes P and dS from the LSE and D the first one saved.
constexpr int kRowsPerTask = 32, kKeysPerTask = 32;

// What each computed value is rounded to: nothing for the fp64 reference (Real = double),
// the dtype for the low-precision replay (Real = float, so sums accumulate in fp32).
template <class Real>
struct Rounding {
  std::optional<DType> dtype;
  Real operator()(Real x) const {
    return dtype ? static_cast<Real>(round_to(*dtype, static_cast<float>(x))) : x;
  }
};

// One head of a [batch, seq, heads, dim] tensor converted to Real once, row-major and
// transposed, so that multiply_abt can take it on either side:
//   rows[i * dim + d] = T[i][d]        cols[d * n + i] = T[i][d]
template <class Real>
struct Panel {
  int n = 0;
  std::vector<Real> rows, cols;
  std::vector<Real> squared_cols;  // cols squared: the fp64 reference's rounding spreads only
};

// `factor` scales each (rounded) element before it is rounded again: Q enters as scale Q.
template <class Real>
Panel<Real> make_panel(const HostView& t, int b, int h, int n, int dim, Real factor,
                       const Rounding<Real>& round) {
  Panel<Real> panel{n, std::vector<Real>(static_cast<size_t>(n) * dim),
                    std::vector<Real>(static_cast<size_t>(dim) * n), {}};
  for (int i = 0; i < n; ++i) {
    const float* row = t.data + b * t.stride.batch + i * t.stride.seq + h * t.stride.head;
    for (int d = 0; d < dim; ++d) {
      const Real x = round(round(static_cast<Real>(row[d])) * factor);
      panel.rows[static_cast<size_t>(i) * dim + d] = x;
      panel.cols[static_cast<size_t>(d) * n + i] = x;
    }
  }
  if (!round.dtype)
    for (Real x : panel.cols) panel.squared_cols.push_back(x * x);
  return panel;
}

// Per row of a panel: its Euclidean norm (row_norms) or its largest |element| (row_max_abs).
template <class Real>
std::vector<Real> row_norms(const Panel<Real>& panel, int dim) {
  std::vector<Real> norms(panel.n);
  for (int i = 0; i < panel.n; ++i) {
    Real sum = 0;
    for (int d = 0; d < dim; ++d) {
      const Real x = panel.rows[static_cast<size_t>(i) * dim + d];
      sum += x * x;
    }
    norms[i] = std::sqrt(sum);
  }
  return norms;
}

template <class Real>
std::vector<Real> row_max_abs(const Panel<Real>& panel, int dim) {
  std::vector<Real> maxima(panel.n, Real{0});
  for (int i = 0; i < panel.n; ++i)
    for (int d = 0; d < dim; ++d)
      maxima[i] = std::max(maxima[i], std::abs(panel.rows[static_cast<size_t>(i) * dim + d]));
  return maxima;
}

// A query head's inputs, and what the row walk leaves for the key walk: the log-sum-exp of
// each row's (scaled) scores and D = rowsum(P ∘ dP). The norms and maxima size the
// cancellation terms (ReferenceGradients::dq_cancellation).
template <class Real>
struct QueryHead {
  Panel<Real> q, d_o;  // q holds scale * Q
  std::vector<Real> lse, delta;
  std::vector<Real> d_o_norm, q_max;
};

template <class Real>
struct KeyHead {
  Panel<Real> k, v;
  std::vector<Real> v_norm, k_max;
  Real v_norm_max = 0;  // bounds ‖O‖ of every row, O being a convex combination of V rows
};

// Per element of dQ (a row's) and of dK (a key's): Σ P ‖dO‖ (‖V‖ + max ‖V‖) |K| (|Q| for
// dK), before the fp32 rounding factor; and per key Σ_i P_ij max_d |scale Q_id|.
struct CancellationTerms {
  std::vector<double> dq_rows, dk_keys, p_q_keys;
  // Per row of dQ, key of dK and key of dV: the largest squared rounding spread of its
  // elements (ReferenceGradients::dq_rounding_spread), without dQ's scale; fp64 reference only.
  std::vector<double> dq_spread_rows, dk_spread_keys, dv_spread_keys;
};

template <class Real>
struct Walk {
  const AttentionProblem& p;
  const Rounding<Real>& round;
  Real scale;

  bool sees(int b, int h, int i, int j) const {
    return j >= p.first_key(i) && j < p.end_key(i) && p.block_visible_at(b, h, i, j);
  }

  // The fp64 reference measures how far rounding P and dS can move the gradients
  // (ReferenceGradients::dq_rounding_spread); the low-precision replay does not.
  bool spreads() const { return !round.dtype; }

  // sum[t * dim + d] += Σ_r m[t * depth + r]² panel(r0 + r, d)²: an [outer, depth] matrix of
  // the walk (P^T or dS^T of a key block, dS of a query block) squared, times the squared
  // panel rows it multiplies.
  static void add_squared_product(const std::vector<Real>& m, int depth, const Panel<Real>& panel,
                                  int r0, int dim, int outer, std::vector<Real>& sum) {
    std::vector<Real> squared(m.size()), product(static_cast<size_t>(outer) * dim);
    for (size_t e = 0; e < m.size(); ++e) squared[e] = m[e] * m[e];
    multiply_abt(squared.data(), depth, panel.squared_cols.data() + r0, panel.n, product.data(),
                 dim, outer, dim, depth);
    for (size_t e = 0; e < product.size(); ++e) sum[e] += product[e];
  }

  // dQ of rows [r0, r1) of (batch b, query head h), with their LSE and D.
  void query_rows(const KeyHead<Real>& kv, QueryHead<Real>& qh, int b, int h, int r0, int r1,
                  std::vector<double>& dq, CancellationTerms& terms) const {
    const int dqk = p.head_dim_qk, dv = p.head_dim_v;
    const int rows = r1 - r0;
    // Visible ranges grow with the row: the first row's start and the last row's end bound
    // every row's.
    const int k0 = p.first_key(r0), nk = p.end_key(r1 - 1) - k0;
    for (int i = r0; i < r1; ++i) {
      qh.lse[i] = -std::numeric_limits<Real>::infinity();
      qh.delta[i] = 0;
    }
    if (nk <= 0) return;
    std::vector<Real> s(static_cast<size_t>(rows) * nk), ds(s.size());
    multiply_abt(qh.q.rows.data() + static_cast<size_t>(r0) * dqk, dqk,
                 kv.k.rows.data() + static_cast<size_t>(k0) * dqk, dqk, s.data(), nk, rows, nk,
                 dqk);
    multiply_abt(qh.d_o.rows.data() + static_cast<size_t>(r0) * dv, dv,
                 kv.v.rows.data() + static_cast<size_t>(k0) * dv, dv, ds.data(), nk, rows, nk, dv);
    for (int r = 0; r < rows; ++r) {
      const int i = r0 + r;
      Real* score = s.data() + static_cast<size_t>(r) * nk;  // becomes P
      Real* grad = ds.data() + static_cast<size_t>(r) * nk;  // dP, then dS
      Real max_score = -std::numeric_limits<Real>::infinity();
      for (int j = 0; j < nk; ++j) {
        score[j] = round(score[j]);
        if (sees(b, h, i, k0 + j)) max_score = std::max(max_score, score[j]);
      }
      if (max_score == -std::numeric_limits<Real>::infinity()) {  // sees no key: P = 0
        std::fill(score, score + nk, Real{0});
        std::fill(grad, grad + nk, Real{0});
        continue;
      }
      Real sum = 0;
      for (int j = 0; j < nk; ++j)
        if (sees(b, h, i, k0 + j)) sum += std::exp(score[j] - max_score);
      qh.lse[i] = max_score + std::log(sum);
      Real delta = 0;
      for (int j = 0; j < nk; ++j) {
        score[j] = sees(b, h, i, k0 + j) ? round(std::exp(score[j] - qh.lse[i])) : Real{0};
        grad[j] = round(grad[j]);
        delta += score[j] * grad[j];
      }
      qh.delta[i] = delta;
      for (int j = 0; j < nk; ++j) grad[j] = round(score[j] * (grad[j] - delta));
      Real size = 0;
      for (int j = 0; j < nk; ++j)
        size += score[j] * (kv.v_norm[k0 + j] + kv.v_norm_max) * kv.k_max[k0 + j];
      terms.dq_rows[(static_cast<size_t>(b) * p.heads_q + h) * p.seqlen_q + i] =
          std::abs(scale) * qh.d_o_norm[i] * size;
    }
    std::vector<Real> g(static_cast<size_t>(rows) * dqk);
    if (spreads()) {  // Σ_j dS_ij² K_jd²
      std::vector<Real> spread(g.size());
      add_squared_product(ds, nk, kv.k, k0, dqk, rows, spread);
      for (int r = 0; r < rows; ++r)
        terms.dq_spread_rows[(static_cast<size_t>(b) * p.heads_q + h) * p.seqlen_q + r0 + r] =
            *std::max_element(spread.begin() + static_cast<size_t>(r) * dqk,
                              spread.begin() + static_cast<size_t>(r + 1) * dqk);
    }
    multiply_abt(ds.data(), nk, kv.k.cols.data() + k0, kv.k.n, g.data(), dqk, rows, dqk, nk);
    for (int r = 0; r < rows; ++r)
      for (int d = 0; d < dqk; ++d)
        dq[((static_cast<size_t>(b) * p.seqlen_q + r0 + r) * p.heads_q + h) * dqk + d] =
            round(round(g[static_cast<size_t>(r) * dqk + d]) * scale);
  }

  // dK and dV of keys [j0, j1) of (batch b, kv head hkv), summed over the group's heads.
  void key_rows(const KeyHead<Real>& kv, const std::vector<QueryHead<Real>>& heads, int b,
                int hkv, int j0, int j1, std::vector<double>& dk, std::vector<double>& dv_out,
                CancellationTerms& terms) const {
    const int dqk = p.head_dim_qk, dv = p.head_dim_v;
    const int keys = j1 - j0, group = p.heads_q / p.heads_kv;
    // The rows that see a key of the block are contiguous (both visible-range ends grow
    // with the row): those whose range ends after j0 and starts before j1.
    int r0 = 0, r1 = p.seqlen_q;
    while (r0 < p.seqlen_q && p.end_key(r0) <= j0) ++r0;
    while (r1 > r0 && p.first_key(r1 - 1) >= j1) --r1;
    const int rows = r1 - r0;
    std::vector<Real> k_sum(static_cast<size_t>(keys) * dqk), v_sum(static_cast<size_t>(keys) * dv);
    std::vector<Real> size(keys, Real{0}), p_q(keys, Real{0});
    // Σ_i dS_ij² (scale Q_id)² and Σ_i P_ij² dO_id², over the group (spreads() only)
    std::vector<Real> dk_spread(spreads() ? k_sum.size() : 0);
    std::vector<Real> dv_spread(spreads() ? v_sum.size() : 0);
    if (rows > 0) {
      std::vector<Real> pt(static_cast<size_t>(keys) * rows), dst(pt.size());
      std::vector<Real> gk(k_sum.size()), gv(v_sum.size());
      for (int h = hkv * group; h < (hkv + 1) * group; ++h) {
        const QueryHead<Real>& qh = heads[static_cast<size_t>(b) * p.heads_q + h];
        multiply_abt(kv.k.rows.data() + static_cast<size_t>(j0) * dqk, dqk,
                     qh.q.rows.data() + static_cast<size_t>(r0) * dqk, dqk, pt.data(), rows,
                     keys, rows, dqk);
        multiply_abt(kv.v.rows.data() + static_cast<size_t>(j0) * dv, dv,
                     qh.d_o.rows.data() + static_cast<size_t>(r0) * dv, dv, dst.data(), rows,
                     keys, rows, dv);
        for (int t = 0; t < keys; ++t)
          for (int r = 0; r < rows; ++r) {
            const int i = r0 + r;
            Real& prob = pt[static_cast<size_t>(t) * rows + r];
            Real& grad = dst[static_cast<size_t>(t) * rows + r];
            prob = sees(b, h, i, j0 + t) ? round(std::exp(round(prob) - qh.lse[i])) : Real{0};
            grad = round(prob * (round(grad) - qh.delta[i]));
            size[t] += prob * qh.d_o_norm[i] * qh.q_max[i];
            p_q[t] += prob * qh.q_max[i];
          }
        multiply_abt(pt.data(), rows, qh.d_o.cols.data() + r0, qh.d_o.n, gv.data(), dv, keys,
                     dv, rows);
        multiply_abt(dst.data(), rows, qh.q.cols.data() + r0, qh.q.n, gk.data(), dqk, keys, dqk,
                     rows);
        if (spreads()) {
          add_squared_product(pt, rows, qh.d_o, r0, dv, keys, dv_spread);
          add_squared_product(dst, rows, qh.q, r0, dqk, keys, dk_spread);
        }
        for (size_t e = 0; e < gv.size(); ++e) v_sum[e] += round(gv[e]);
        for (size_t e = 0; e < gk.size(); ++e) k_sum[e] += round(gk[e]);
      }
    }
    for (int t = 0; t < keys; ++t) {
      const size_t row = (static_cast<size_t>(b) * p.seqlen_k + j0 + t) * p.heads_kv + hkv;
      if (spreads()) {
        terms.dk_spread_keys[row] = *std::max_element(dk_spread.begin() + t * dqk,
                                                      dk_spread.begin() + (t + 1) * dqk);
        terms.dv_spread_keys[row] = *std::max_element(dv_spread.begin() + t * dv,
                                                      dv_spread.begin() + (t + 1) * dv);
      }
      terms.dk_keys[row] = size[t] * (kv.v_norm[j0 + t] + kv.v_norm_max);
      terms.p_q_keys[row] = p_q[t];
      for (int d = 0; d < dqk; ++d) dk[row * dqk + d] = round(k_sum[static_cast<size_t>(t) * dqk + d]);
      for (int c = 0; c < dv; ++c) dv_out[row * dv + c] = round(v_sum[static_cast<size_t>(t) * dv + c]);
    }
  }
};

template <class Real>
ReferenceGradients gradients_fixed(const AttentionProblem& p, HostView q, HostView k, HostView v,
                                   HostView d_o, const Rounding<Real>& round, int threads) {
  const int group = p.heads_q / p.heads_kv;
  const int dqk = p.head_dim_qk, dv = p.head_dim_v;
  const Walk<Real> walk{p, round, static_cast<Real>(p.scale())};

  std::vector<QueryHead<Real>> heads(static_cast<size_t>(p.batch) * p.heads_q);
  parallel_for(static_cast<int>(heads.size()), threads, [&](int task) {
    const int b = task / p.heads_q, h = task % p.heads_q;
    QueryHead<Real>& qh = heads[task];
    qh.q = make_panel(q, b, h, p.seqlen_q, dqk, walk.scale, round);
    qh.d_o = make_panel(d_o, b, h, p.seqlen_q, dv, Real{1}, round);
    qh.lse.resize(p.seqlen_q);
    qh.delta.resize(p.seqlen_q);
    qh.d_o_norm = row_norms(qh.d_o, dv);
    qh.q_max = row_max_abs(qh.q, dqk);
  });
  std::vector<KeyHead<Real>> kv_heads(static_cast<size_t>(p.batch) * p.heads_kv);
  parallel_for(static_cast<int>(kv_heads.size()), threads, [&](int task) {
    const int b = task / p.heads_kv, h = task % p.heads_kv;
    kv_heads[task].k = make_panel(k, b, h, p.seqlen_k, dqk, Real{1}, round);
    KeyHead<Real>& kv = kv_heads[task];
    kv.v = make_panel(v, b, h, p.seqlen_k, dv, Real{1}, round);
    kv.v_norm = row_norms(kv.v, dv);
    kv.k_max = row_max_abs(kv.k, dqk);
    for (Real norm : kv.v_norm) kv.v_norm_max = std::max(kv.v_norm_max, norm);
  });

  ReferenceGradients out;
  out.dq.resize(static_cast<size_t>(p.batch) * p.seqlen_q * p.heads_q * dqk);
  out.dk.resize(static_cast<size_t>(p.batch) * p.seqlen_k * p.heads_kv * dqk);
  out.dv.resize(static_cast<size_t>(p.batch) * p.seqlen_k * p.heads_kv * dv);
  CancellationTerms terms{
      std::vector<double>(static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q),
      std::vector<double>(static_cast<size_t>(p.batch) * p.seqlen_k * p.heads_kv),
      std::vector<double>(static_cast<size_t>(p.batch) * p.seqlen_k * p.heads_kv),
      std::vector<double>(static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q),
      std::vector<double>(static_cast<size_t>(p.batch) * p.seqlen_k * p.heads_kv),
      std::vector<double>(static_cast<size_t>(p.batch) * p.seqlen_k * p.heads_kv)};
  const int row_blocks = (p.seqlen_q + kRowsPerTask - 1) / kRowsPerTask;
  parallel_for(p.batch * p.heads_q * row_blocks, threads, [&](int task) {
    const int block = task % row_blocks;
    const int h = (task / row_blocks) % p.heads_q;
    const int b = task / row_blocks / p.heads_q;
    const int r0 = block * kRowsPerTask;
    walk.query_rows(kv_heads[static_cast<size_t>(b) * p.heads_kv + h / group],
                    heads[static_cast<size_t>(b) * p.heads_q + h], b, h, r0,
                    std::min(p.seqlen_q, r0 + kRowsPerTask), out.dq, terms);
  });
  const int key_blocks = (p.seqlen_k + kKeysPerTask - 1) / kKeysPerTask;
  parallel_for(p.batch * p.heads_kv * key_blocks, threads, [&](int task) {
    const int block = task % key_blocks;
    const int hkv = (task / key_blocks) % p.heads_kv;
    const int b = task / key_blocks / p.heads_kv;
    const int j0 = block * kKeysPerTask;
    walk.key_rows(kv_heads[static_cast<size_t>(b) * p.heads_kv + hkv], heads, b, hkv, j0,
                  std::min(p.seqlen_k, j0 + kKeysPerTask), out.dk, out.dv, terms);
  });
  // The rounding of an fp32 dot product of random-signed terms is about 2^-24 times the
  // product of the two vectors' norms (its partial sums random-walk); 2^-23 covers the two
  // of dP and D with room for the largest of many elements.
  const double rounding = std::ldexp(1.0, -23);
  for (double x : terms.dq_rows) out.dq_cancellation = std::max(out.dq_cancellation, rounding * x);
  for (double x : terms.dk_keys) out.dk_cancellation = std::max(out.dk_cancellation, rounding * x);
  for (double x : terms.p_q_keys) out.max_p_q_column = std::max(out.max_p_q_column, x);
  const auto largest = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : std::sqrt(*std::max_element(v.begin(), v.end()));
  };
  out.dq_rounding_spread =
      std::abs(static_cast<double>(walk.scale)) * largest(terms.dq_spread_rows);
  out.dk_rounding_spread = largest(terms.dk_spread_keys);
  out.dv_rounding_spread = largest(terms.dv_spread_keys);
  return out;
}

// Each sequence on its own, scattered into the packed gradients (an empty sequence leaves
// zeros).
template <class Real>
ReferenceGradients gradients(const AttentionProblem& p, HostView q, HostView k, HostView v,
                             HostView d_o, const Rounding<Real>& round, int threads) {
  threads = thread_count(threads);
  if (p.cu_seqlens_q.empty()) return gradients_fixed(p, q, k, v, d_o, round, threads);
  const int total_q = p.cu_seqlens_q.back(), total_k = p.cu_seqlens_k.back();
  const int dqk = p.head_dim_qk, dv = p.head_dim_v;
  ReferenceGradients out;
  out.dq.assign(static_cast<size_t>(total_q) * p.heads_q * dqk, 0.0);
  out.dk.assign(static_cast<size_t>(total_k) * p.heads_kv * dqk, 0.0);
  out.dv.assign(static_cast<size_t>(total_k) * p.heads_kv * dv, 0.0);
  const auto at = [](HostView view, int row) {
    view.data += row * view.stride.seq;
    return view;
  };
  for (int s = 0; s < p.batch; ++s) {
    const AttentionProblem one = sequence_problem(p, s);
    if (one.seqlen_q == 0 || one.seqlen_k == 0) continue;
    const int q0 = p.cu_seqlens_q[s], k0 = p.cu_seqlens_k[s];
    const ReferenceGradients part = gradients_fixed(one, at(q, q0), at(k, k0), at(v, k0),
                                                    at(d_o, q0), round, threads);
    const auto place = [](const std::vector<double>& from, std::vector<double>& to, size_t at) {
      std::copy(from.begin(), from.end(), to.begin() + static_cast<std::ptrdiff_t>(at));
    };
    place(part.dq, out.dq, static_cast<size_t>(q0) * p.heads_q * dqk);
    place(part.dk, out.dk, static_cast<size_t>(k0) * p.heads_kv * dqk);
    place(part.dv, out.dv, static_cast<size_t>(k0) * p.heads_kv * dv);
    out.dq_cancellation = std::max(out.dq_cancellation, part.dq_cancellation);
    out.dk_cancellation = std::max(out.dk_cancellation, part.dk_cancellation);
    out.max_p_q_column = std::max(out.max_p_q_column, part.max_p_q_column);
    out.dq_rounding_spread = std::max(out.dq_rounding_spread, part.dq_rounding_spread);
    out.dk_rounding_spread = std::max(out.dk_rounding_spread, part.dk_rounding_spread);
    out.dv_rounding_spread = std::max(out.dv_rounding_spread, part.dv_rounding_spread);
  }
  return out;
}

}  // namespace

ReferenceGradients reference_backward(const AttentionProblem& problem, HostView q, HostView k,
                                      HostView v, HostView d_o, int threads) {
  return gradients(problem, q, k, v, d_o, Rounding<double>{}, threads);
}

ReferenceGradients lowp_backward(const AttentionProblem& problem, HostView q, HostView k,
                                 HostView v, HostView d_o, DType dtype, int threads) {
  return gradients(problem, q, k, v, d_o, Rounding<float>{dtype}, threads);
}

}  // namespace flashjit::verify
