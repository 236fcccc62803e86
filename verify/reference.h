// The fp64 CPU reference of the attention forward pass, in DESIGN.md's conventions:
// Q [batch, seqlen_q, heads_q, d_qk], K [batch, seqlen_k, heads_kv, d_qk],
// V [batch, seqlen_k, heads_kv, d_v] given as floats (already rounded from fp16/bf16) with
// explicit element strides (head_dim stride 1); GQA maps query head h to kv head
// h / (heads_q / heads_kv); causal is bottom-right aligned (query i sees key j iff
// j <= i + seqlen_k - seqlen_q), and so is a sliding window (i + d - left <= j <= i + d +
// right, d = seqlen_k - seqlen_q); a block mask (block_sparse or pattern) further limits query
// i to the keys j whose block (i / block_q, j / block_k) is visible, blocks counted from each
// sequence's start; a row that sees no key has O = 0 and LSE = -inf. Variable-length batches
// (cu_seqlens) take packed [total, heads, dim] tensors and give O [total_q, heads_q, d_v] and
// LSE [heads_q, total_q].
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
  // Block mask: block_visible [block_batch, block_heads, q_blocks, k_blocks] (nonzero:
  // visible), block_batch 1 or batch and block_heads 1 or heads_q (broadcast). block_q == 0:
  // no block mask. Blocks past q_blocks / k_blocks are not visible.
  int block_q = 0, block_k = 0;
  int block_batch = 1, block_heads = 1, q_blocks = 0, k_blocks = 0;
  std::vector<uint8_t> block_visible;
  // Variable-length batches: batch + 1 prefix sums (seqlen_q / seqlen_k are then unused), or
  // both empty.
  std::vector<int> cu_seqlens_q, cu_seqlens_k;

  double scale() const;
  // The keys query row i may attend to are [first_key(i), end_key(i)); both grow with i.
  int first_key(int i) const;
  int end_key(int i) const;
  int visible_keys(int i) const { return end_key(i) - first_key(i); }
  // Whether the block mask lets query i of (batch b, head h) see key j (true without one).
  bool block_visible_at(int b, int h, int i, int j) const;
  // (query, key) pairs that every row of every batch and head sees: the FLOP count's base.
  double visible_pairs() const;
};

// Sequence s of a variable-length problem as a fixed-length problem of batch 1 (its own slice
// of a per-batch block mask).
AttentionProblem sequence_problem(const AttentionProblem& problem, int s);

// The dense block matrix [q_blocks, k_blocks] of a spec's pattern (configs/README.md
// defines each kind), written from the definitions, independently of the kernel's arithmetic.
std::vector<uint8_t> pattern_block_matrix(const Spec& spec, int q_blocks, int k_blocks);

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
