// The parameters every attention kernel reads, forward and backward alike: the tensors, their
// strides and shape, the block-sparse layout and the variable-length batch. This header is
// compiled twice: by the host compiler (runtime/forward_params.cpp fills it) and by NVRTC (the
// kernels read it), so it uses only built-in types and must keep one layout in both.
#pragma once

// Block-sparse layout (mask: block_sparse; null otherwise): the list of query block qb of
// (b, h) has counts[e] entries at indices + e * max_blocks, where e = b * batch_stride +
// h * head_stride + qb (a broadcast dimension has stride 0).
struct BlockSparseLayout {
  const int* counts;
  const int* indices;
  long long batch_stride, head_stride;
  int max_blocks;
};

struct AttnParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // null: LSE is not written (forward)

  // Strides in elements; the head_dim stride is 1.
  long long q_batch_stride, q_seq_stride, q_head_stride;
  long long k_batch_stride, k_seq_stride, k_head_stride;
  long long v_batch_stride, v_seq_stride, v_head_stride;
  long long o_batch_stride, o_seq_stride, o_head_stride;

  int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  int heads_per_kv;       // heads_q / heads_kv (GQA group size)
  float scale_log2;       // softmax_scale * log2(e): scores live in the exp2 domain
  float softmax_scale;

  BlockSparseLayout block_sparse;

  // Variable-length batches: batch + 1 prefix sums of the sequence lengths, or both null.
  // Sequence b is rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1 of packed tensors; seqlen_q and
  // seqlen_k above are then the longest sequence's, and LSE is [heads_q, total_q].
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
};
