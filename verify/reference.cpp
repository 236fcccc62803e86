#include "verify/reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

namespace flashjit::verify {

namespace {

constexpr int kRowsPerTask = 32;

// K and V of one (batch, kv head) converted to double once, both with the summed-over index
// contiguous so that one matrix product routine serves S = Q·Kᵀ and O = P·V:
//   k[j * d_qk + d] = K[j][d]        vt[c * seqlen_k + j] = V[j][c]
struct KvPanel {
  std::vector<double> k, vt;
};

KvPanel make_panel(const AttentionProblem& p, const HostView& k, const HostView& v, int b,
                   int hkv) {
  KvPanel panel;
  panel.k.resize(static_cast<size_t>(p.seqlen_k) * p.head_dim_qk);
  panel.vt.resize(static_cast<size_t>(p.head_dim_v) * p.seqlen_k);
  for (int j = 0; j < p.seqlen_k; ++j) {
    const float* krow = k.data + b * k.stride.batch + j * k.stride.seq + hkv * k.stride.head;
    const float* vrow = v.data + b * v.stride.batch + j * v.stride.seq + hkv * v.stride.head;
    for (int d = 0; d < p.head_dim_qk; ++d)
      panel.k[static_cast<size_t>(j) * p.head_dim_qk + d] = krow[d];
    for (int c = 0; c < p.head_dim_v; ++c)
      panel.vt[static_cast<size_t>(c) * p.seqlen_k + j] = vrow[c];
  }
  return panel;
}

// C[i][j] = sum over t = 0, 1, ..., depth - 1 of A[i][t] * B[j][t] (row-major, leading
// dimensions lda/ldb/ldc). Every element is one sum in ascending t (a chunk of t resumes
// from the partial sum stored in C), so the result does not depend on the blocking or on the
// thread count. Blocks of 4 x 2 outputs keep 8 independent accumulators in registers (enough
// to hide the FMA latency); chunks of kDepthChunk along t keep the rows of A in cache while
// the column blocks of B stream past them.
void multiply_abt(const double* a, size_t lda, const double* b, size_t ldb, double* c,
                  size_t ldc, int rows, int cols, int depth) {
  constexpr int kRows = 4, kCols = 2, kDepthChunk = 256;
  for (int i = 0; i < rows; ++i) std::fill(c + i * ldc, c + i * ldc + cols, 0.0);
  for (int t0 = 0; t0 < depth; t0 += kDepthChunk) {
    const int t1 = std::min(depth, t0 + kDepthChunk);
    for (int j0 = 0; j0 < cols; j0 += kCols) {
      const int nj = std::min(kCols, cols - j0);
      for (int i0 = 0; i0 < rows; i0 += kRows) {
        const int ni = std::min(kRows, rows - i0);
        if (ni == kRows && nj == kCols) {
          const double* a0 = a + i0 * lda;
          const double* b0 = b + j0 * ldb;
          double* c0 = c + i0 * ldc + j0;
          double s00 = c0[0], s01 = c0[1], s10 = c0[ldc], s11 = c0[ldc + 1];
          double s20 = c0[2 * ldc], s21 = c0[2 * ldc + 1], s30 = c0[3 * ldc], s31 = c0[3 * ldc + 1];
          for (int t = t0; t < t1; ++t) {
            const double x0 = a0[t], x1 = a0[lda + t], x2 = a0[2 * lda + t], x3 = a0[3 * lda + t];
            const double y0 = b0[t], y1 = b0[ldb + t];
            s00 += x0 * y0, s01 += x0 * y1, s10 += x1 * y0, s11 += x1 * y1;
            s20 += x2 * y0, s21 += x2 * y1, s30 += x3 * y0, s31 += x3 * y1;
          }
          c0[0] = s00, c0[1] = s01, c0[ldc] = s10, c0[ldc + 1] = s11;
          c0[2 * ldc] = s20, c0[2 * ldc + 1] = s21, c0[3 * ldc] = s30, c0[3 * ldc + 1] = s31;
          continue;
        }
        for (int i = i0; i < i0 + ni; ++i)
          for (int j = j0; j < j0 + nj; ++j) {
            double sum = c[i * ldc + j];
            for (int t = t0; t < t1; ++t) sum += a[i * lda + t] * b[j * ldb + t];
            c[i * ldc + j] = sum;
          }
      }
    }
  }
}

// Query rows [row_begin, row_end) of one (batch, head): O rows and LSE entries.
void attend_rows(const AttentionProblem& p, const KvPanel& panel, const HostView& q, int b, int h,
                 int row_begin, int row_end, ReferenceOutput& out) {
  const int rows = row_end - row_begin;
  const int dqk = p.head_dim_qk, dv = p.head_dim_v;
  // Visible ranges grow with the row, so the last row's end bounds every row's.
  const int keys = p.end_key(row_end - 1);
  std::vector<double> qd(static_cast<size_t>(rows) * dqk);
  for (int r = 0; r < rows; ++r) {
    const float* qrow =
        q.data + b * q.stride.batch + (row_begin + r) * q.stride.seq + h * q.stride.head;
    std::copy(qrow, qrow + dqk, qd.begin() + static_cast<size_t>(r) * dqk);
  }
  // Scores, then probabilities in place (0 outside each row's visible keys).
  std::vector<double> s(static_cast<size_t>(rows) * std::max(keys, 1));
  multiply_abt(qd.data(), dqk, panel.k.data(), dqk, s.data(), keys, rows, keys, dqk);
  std::vector<double> sums(rows, 0.0);
  const double scale = p.scale();
  for (int r = 0; r < rows; ++r) {
    double* row = s.data() + static_cast<size_t>(r) * keys;
    const int first = p.first_key(row_begin + r), end = p.end_key(row_begin + r);
    double* lse = out.lse.data() + (static_cast<size_t>(b) * p.heads_q + h) * p.seqlen_q +
                  row_begin + r;
    std::fill(row, row + first, 0.0);
    std::fill(row + end, row + keys, 0.0);
    if (end == first) {
      *lse = -std::numeric_limits<double>::infinity();
      continue;
    }
    double max_score = -std::numeric_limits<double>::infinity();
    for (int j = first; j < end; ++j) max_score = std::max(max_score, row[j] * scale);
    for (int j = first; j < end; ++j) {
      row[j] = std::exp(row[j] * scale - max_score);
      sums[r] += row[j];
    }
    *lse = max_score + std::log(sums[r]);
  }
  std::vector<double> o(static_cast<size_t>(rows) * dv);
  multiply_abt(s.data(), keys, panel.vt.data(), p.seqlen_k, o.data(), dv, rows, dv, keys);
  for (int r = 0; r < rows; ++r) {
    double* orow =
        out.o.data() + ((static_cast<size_t>(b) * p.seqlen_q + row_begin + r) * p.heads_q + h) * dv;
    for (int c = 0; c < dv; ++c)  // an empty row has sum 0 and O = 0
      orow[c] = sums[r] > 0 ? o[static_cast<size_t>(r) * dv + c] / sums[r] : 0.0;
  }
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

int AttentionProblem::first_key(int i) const {
  if (!window) return 0;
  return std::clamp(i + seqlen_k - seqlen_q - window_left, 0, seqlen_k);
}

int AttentionProblem::end_key(int i) const {
  int end = seqlen_k;
  const int diag = seqlen_k - seqlen_q;
  if (causal) end = std::min(end, i + diag + 1);
  if (window) end = std::min(end, i + diag + window_right + 1);
  // An empty row (end <= first) is [first, first).
  return std::max(std::max(end, 0), first_key(i));
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
    const int row_begin = block * kRowsPerTask;
    attend_rows(p, panel, q, b, h, row_begin, std::min(p.seqlen_q, row_begin + kRowsPerTask), out);
  });
  return out;
}

}  // namespace flashjit::verify
