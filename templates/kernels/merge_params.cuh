// Kernel parameters of the merge of two partial attention results (Kernel::merge). Compiled
// by the host compiler and by NVRTC, as attn/params.cuh.
#pragma once

struct MergeParams {
  // O in [batch, seqlen, heads, head_dim_v] with these strides (elements), LSE fp32
  // contiguous [batch, heads, seqlen]. o / lse may be o_a / lse_a (a running output).
  const void* o_a;
  const float* lse_a;
  const void* o_b;
  const float* lse_b;
  void* o;
  float* lse;
  long long a_batch_stride, a_seq_stride, a_head_stride;
  long long b_batch_stride, b_seq_stride, b_head_stride;
  long long o_batch_stride, o_seq_stride, o_head_stride;
  int batch, heads, seqlen;
};
