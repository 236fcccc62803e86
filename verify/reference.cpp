#include "verify/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "verify/dense_math.h"

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
    std::vector<bool> sees(end > first ? end - first : 0);
    bool any = false;
    for (int j = first; j < end; ++j) {
      sees[j - first] = p.block_visible_at(b, h, row_begin + r, j);
      any = any || sees[j - first];
    }
    if (!any) {
      std::fill(row + first, row + end, 0.0);
      *lse = -std::numeric_limits<double>::infinity();
      continue;
    }
    double max_score = -std::numeric_limits<double>::infinity();
    for (int j = first; j < end; ++j)
      if (sees[j - first]) max_score = std::max(max_score, row[j] * scale);
    for (int j = first; j < end; ++j) {
      row[j] = sees[j - first] ? std::exp(row[j] * scale - max_score) : 0.0;
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

ReferenceOutput forward_fixed(const AttentionProblem& p, HostView q, HostView k, HostView v,
                              int threads) {
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

// Each sequence on its own, scattered into the packed outputs.
ReferenceOutput forward_varlen(const AttentionProblem& p, HostView q, HostView k, HostView v,
                               int threads) {
  const int total_q = p.cu_seqlens_q.back();
  ReferenceOutput out;
  out.o.assign(static_cast<size_t>(total_q) * p.heads_q * p.head_dim_v, 0.0);
  out.lse.assign(static_cast<size_t>(p.heads_q) * total_q, 0.0);
  for (int s = 0; s < p.batch; ++s) {
    const AttentionProblem one = sequence_problem(p, s);
    if (one.seqlen_q == 0) continue;
    const auto at = [](HostView view, int row) {
      view.data += row * view.stride.seq;
      return view;
    };
    const int q0 = p.cu_seqlens_q[s];
    const ReferenceOutput part = forward_fixed(one, at(q, q0), at(k, p.cu_seqlens_k[s]),
                                               at(v, p.cu_seqlens_k[s]), threads);
    std::copy(part.o.begin(), part.o.end(),
              out.o.begin() + static_cast<std::ptrdiff_t>(q0) * p.heads_q * p.head_dim_v);
    for (int h = 0; h < p.heads_q; ++h)
      std::copy_n(part.lse.begin() + static_cast<std::ptrdiff_t>(h) * one.seqlen_q, one.seqlen_q,
                  out.lse.begin() + static_cast<std::ptrdiff_t>(h) * total_q + q0);
  }
  return out;
}

}  // namespace

AttentionProblem sequence_problem(const AttentionProblem& p, int s) {
  AttentionProblem one = p;
  one.batch = 1;
  one.seqlen_q = p.cu_seqlens_q[s + 1] - p.cu_seqlens_q[s];
  one.seqlen_k = p.cu_seqlens_k[s + 1] - p.cu_seqlens_k[s];
  one.cu_seqlens_q.clear();
  one.cu_seqlens_k.clear();
  if (p.block_q != 0 && p.block_batch > 1) {
    const size_t per_batch = static_cast<size_t>(p.block_heads) * p.q_blocks * p.k_blocks;
    one.block_batch = 1;
    one.block_visible.assign(p.block_visible.begin() + static_cast<std::ptrdiff_t>(s * per_batch),
                             p.block_visible.begin() +
                                 static_cast<std::ptrdiff_t>((s + 1) * per_batch));
  }
  return one;
}

bool AttentionProblem::block_visible_at(int b, int h, int i, int j) const {
  if (block_q == 0) return true;
  const int qb = i / block_q, kb = j / block_k;
  if (qb >= q_blocks || kb >= k_blocks) return false;
  const size_t row = (static_cast<size_t>(block_batch > 1 ? b : 0) * block_heads +
                      (block_heads > 1 ? h : 0)) * q_blocks + qb;
  return block_visible[row * k_blocks + kb] != 0;
}

double AttentionProblem::visible_pairs() const {
  double total = 0;
  if (!cu_seqlens_q.empty()) {
    for (int s = 0; s < batch; ++s) total += sequence_problem(*this, s).visible_pairs();
    return total;
  }
  // Without a per-batch or per-head mask every batch and head sees the same pairs.
  const int batches = block_q != 0 ? block_batch : 1;
  const int heads = block_q != 0 ? block_heads : 1;
  for (int b = 0; b < batches; ++b)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < seqlen_q; ++i) {
        const int first = first_key(i), end = end_key(i);
        if (block_q == 0) {
          total += end - first;
          continue;
        }
        for (int kb = first / block_k; kb * block_k < end; ++kb)
          if (block_visible_at(b, h, i, kb * block_k))
            total += std::min(end, (kb + 1) * block_k) - std::max(first, kb * block_k);
      }
  return total * (static_cast<double>(batch) / batches) * (static_cast<double>(heads_q) / heads);
}

std::vector<uint8_t> pattern_block_matrix(const Spec& spec, int q_blocks, int k_blocks) {
  std::vector<uint8_t> visible(static_cast<size_t>(q_blocks) * k_blocks, 0);
  for (int qb = 0; qb < q_blocks; ++qb)
    for (int kb = 0; kb < k_blocks; ++kb) {
      const int distance = std::abs(qb - kb);
      bool sees = false;
      switch (spec.pattern) {
        case PatternKind::Local: sees = distance <= spec.pattern_window; break;
        case PatternKind::Strided: sees = distance % spec.pattern_stride == 0; break;
        case PatternKind::GlobalLocal:
          sees = kb < spec.pattern_global || qb < spec.pattern_global ||
                 distance <= spec.pattern_window;
          break;
        case PatternKind::None:
          throw Error(ErrorKind::Usage, fmt::format("spec {} has no pattern", spec.name));
      }
      visible[static_cast<size_t>(qb) * k_blocks + kb] = sees ? 1 : 0;
    }
  return visible;
}

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
  threads = thread_count(threads);
  return p.cu_seqlens_q.empty() ? forward_fixed(p, q, k, v, threads)
                                : forward_varlen(p, q, k, v, threads);
}

}  // namespace flashjit::verify
