#include "verify/reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

namespace flashjit::verify {

namespace {

constexpr int kRowsPerTask = 32;

// K and V of one (batch, kv head) converted to double once and laid out so that the inner
// loops run over contiguous memory without reassociating any sum (so they vectorize and
// every score is the plain sum over d in order):
//   kt[d * seqlen_k + j] = K[j][d]      scores[j] += q[d] * kt[d][j]
//   vd[j * d_v + c]      = V[j][c]      o[c]      += p[j] * vd[j][c]
struct KvPanel {
  std::vector<double> kt, vd;
};

KvPanel make_panel(const AttentionProblem& p, const HostView& k, const HostView& v, int b,
                   int hkv) {
  KvPanel panel;
  panel.kt.resize(static_cast<size_t>(p.head_dim_qk) * p.seqlen_k);
  panel.vd.resize(static_cast<size_t>(p.seqlen_k) * p.head_dim_v);
  for (int j = 0; j < p.seqlen_k; ++j) {
    const float* krow = k.data + b * k.stride.batch + j * k.stride.seq + hkv * k.stride.head;
    const float* vrow = v.data + b * v.stride.batch + j * v.stride.seq + hkv * v.stride.head;
    for (int d = 0; d < p.head_dim_qk; ++d)
      panel.kt[static_cast<size_t>(d) * p.seqlen_k + j] = krow[d];
    for (int c = 0; c < p.head_dim_v; ++c)
      panel.vd[static_cast<size_t>(j) * p.head_dim_v + c] = vrow[c];
  }
  return panel;
}

// One query row: O row and LSE.
void attend_row(const AttentionProblem& p, const KvPanel& panel, const float* qrow, int i,
                std::vector<double>& scores, double* orow, double* lse) {
  const int n = p.visible_keys(i);
  std::fill(orow, orow + p.head_dim_v, 0.0);
  if (n == 0) {
    *lse = -std::numeric_limits<double>::infinity();
    return;
  }
  std::fill(scores.begin(), scores.begin() + n, 0.0);
  for (int d = 0; d < p.head_dim_qk; ++d) {
    const double qd = qrow[d];
    const double* kt = panel.kt.data() + static_cast<size_t>(d) * p.seqlen_k;
    for (int j = 0; j < n; ++j) scores[j] += qd * kt[j];
  }
  const double scale = p.scale();
  double max_score = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < n; ++j) {
    scores[j] *= scale;
    max_score = std::max(max_score, scores[j]);
  }
  double sum = 0;
  for (int j = 0; j < n; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  for (int j = 0; j < n; ++j) {
    const double pj = scores[j];
    const double* vrow = panel.vd.data() + static_cast<size_t>(j) * p.head_dim_v;
    for (int c = 0; c < p.head_dim_v; ++c) orow[c] += pj * vrow[c];
  }
  for (int c = 0; c < p.head_dim_v; ++c) orow[c] /= sum;
  *lse = max_score + std::log(sum);
}

// Runs fn(task) for task in [0, count) on `threads` threads.
template <class Fn>
void parallel_for(int count, int threads, Fn fn) {
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int task = next++; task < count; task = next++) fn(task);
  };
  std::vector<std::jthread> pool;
  for (int t = 1; t < std::min(threads, count); ++t) pool.emplace_back(worker);
  worker();
}

}  // namespace

double AttentionProblem::scale() const {
  return softmax_scale != 0 ? softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim_qk));
}

int AttentionProblem::visible_keys(int i) const {
  if (!causal) return seqlen_k;
  return std::clamp(i + seqlen_k - seqlen_q + 1, 0, seqlen_k);
}

ReferenceOutput reference_forward(const AttentionProblem& p, HostView q, HostView k, HostView v,
                                  int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int group = p.heads_q / p.heads_kv;

  std::vector<KvPanel> panels(static_cast<size_t>(p.batch) * p.heads_kv);
  parallel_for(static_cast<int>(panels.size()), threads, [&](int task) {
    panels[task] = make_panel(p, k, v, task / p.heads_kv, task % p.heads_kv);
  });

  ReferenceOutput out;
  out.o.resize(static_cast<size_t>(p.batch) * p.seqlen_q * p.heads_q * p.head_dim_v);
  out.lse.resize(static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q);
  const int row_blocks = (p.seqlen_q + kRowsPerTask - 1) / kRowsPerTask;
  parallel_for(p.batch * p.heads_q * row_blocks, threads, [&](int task) {
    const int block = task % row_blocks;
    const int h = (task / row_blocks) % p.heads_q;
    const int b = task / row_blocks / p.heads_q;
    const KvPanel& panel = panels[static_cast<size_t>(b) * p.heads_kv + h / group];
    std::vector<double> scores(p.seqlen_k);
    const int row_end = std::min(p.seqlen_q, (block + 1) * kRowsPerTask);
    for (int i = block * kRowsPerTask; i < row_end; ++i) {
      const float* qrow = q.data + b * q.stride.batch + i * q.stride.seq + h * q.stride.head;
      double* orow =
          out.o.data() + ((static_cast<size_t>(b) * p.seqlen_q + i) * p.heads_q + h) * p.head_dim_v;
      double* lse = out.lse.data() + (static_cast<size_t>(b) * p.heads_q + h) * p.seqlen_q + i;
      attend_row(p, panel, qrow, i, scores, orow, lse);
    }
  });
  return out;
}

}  // namespace flashjit::verify
