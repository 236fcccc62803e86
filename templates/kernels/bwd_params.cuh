// Kernel parameters of the backward pass's launches: the shared AttnParams (q, k, v, o, lse
// as the forward had them) and the gradients with their strides, plus the scratch the launches
// pass between them. Compiled by the host compiler and by NVRTC, as attn/params.cuh.
#pragma once

#include "../attn/params.cuh"

struct BwdParams : AttnParams {
  const void* d_o;  // O's gradient, in O's layout
  void* d_q;        // out, Q's layout
  void* d_k;        // out, K's layout (summed over the query heads of a GQA group)
  void* d_v;        // out, V's layout
  long long do_batch_stride, do_seq_stride, do_head_stride;
  long long dq_batch_stride, dq_seq_stride, dq_head_stride;
  long long dk_batch_stride, dk_seq_stride, dk_head_stride;
  long long dv_batch_stride, dv_seq_stride, dv_head_stride;
  // D = rowsum(dO * O) in fp32, in LSE's layout (the bwd_pre launch writes it).
  float* d_rows;
  // When the dK/dV kernel accumulates dQ: dQ / softmax_scale in fp32, in blocks of query
  // tiles (attn/dq_accum.cuh, dq_tile_index), zeroed by the runtime before the launches and
  // read by bwd_dq_convert. Null otherwise.
  float* dq_accum;
  // When it adds to those blocks in key-block order (deterministic): kDqTurnsPerBlock counters
  // a block, the adds each of its shares has had (attn/dq_accum.cuh), zeroed too. Null
  // otherwise.
  int* dq_turns;
};
