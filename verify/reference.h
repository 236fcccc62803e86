// The fp64 CPU reference of the attention forward pass, in DESIGN.md's conventions:
// Q [batch, seqlen_q, heads_q, d_qk], K [batch, seqlen_k, heads_kv, d_qk],
// V [batch, seqlen_k, heads_kv, d_v] given as floats (already rounded from fp16/bf16) with
// explicit element strides (head_dim stride 1); GQA maps query head h to kv head
// h / (heads_q / heads_kv); causal is bottom-right aligned (query i sees key j iff
// j <= i + seqlen_k - seqlen_q), and so is a sliding window (i + d - left <= j <= i + d +
// right, d = seqlen_k - seqlen_q); a row that sees no key has O = 0 and LSE = -inf.
#pragma once

#include <vector>

#include "flashjit/flashjit.h"

namespace flashjit::verify {

struct AttentionProblem {
  int batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1;
  int head_dim_qk = 1, head_dim_v = 1;
  bool causal = false;
  bool window = false;  // sliding window: row i sees keys i+d-window_left .. i+d+window_right
  int window_left = 0, window_right = 0;
  double softmax_scale = 0;  // 0: 1/sqrt(head_dim_qk)

  double scale() const;
  // The keys query row i may attend to are [first_key(i), end_key(i)); both grow with i.
  int first_key(int i) const;
  int end_key(int i) const;
  int visible_keys(int i) const { return end_key(i) - first_key(i); }
};

// A strided host tensor in the [batch, seq, heads, dim] layout.
struct HostView {
  const float* data = nullptr;
  TensorStrides stride;
};

struct ReferenceOutput {
  std::vector<double> o;    // [batch, seqlen_q, heads_q, head_dim_v], contiguous
  std::vector<double> lse;  // [batch, heads_q, seqlen_q], natural log, scale applied
};

// Runs on `threads` threads (0: all hardware threads), splitting over batch, heads and
// blocks of query rows so that a single large head still uses every core.
ReferenceOutput reference_forward(const AttentionProblem& problem, HostView q, HostView k,
                                  HostView v, int threads = 0);

}  // namespace flashjit::verify
