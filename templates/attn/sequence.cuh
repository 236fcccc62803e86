// Where a batch's sequence lies in the tensors, and its rows' LSE as the backward reads it.
// The backward's sm90 kernels share these.
#pragma once

#include "../arch/common.cuh"
#include "params.cuh"

namespace fj {

// With cu_seqlens (kVarlen) the sequence is a slice of the packed tensors, rows q_start .. of
// Q and k_start .. of K, which the TMA maps see as one batch of total rows (tma_batch 0); rows
// a box reads past the slice belong to the next sequence. diag = seqlen_k - seqlen_q aligns
// causal and window masks bottom-right.
struct Sequence {
  int q_start, k_start, seqlen_q, seqlen_k, diag, tma_batch;
};

template <bool kVarlen>
__device__ __forceinline__ Sequence sequence_of(const AttnParams& p, int batch) {
  Sequence s;
  if constexpr (kVarlen) {
    s.q_start = p.cu_seqlens_q[batch];
    s.k_start = p.cu_seqlens_k[batch];
    s.seqlen_q = p.cu_seqlens_q[batch + 1] - s.q_start;
    s.seqlen_k = p.cu_seqlens_k[batch + 1] - s.k_start;
    s.tma_batch = 0;
  } else {
    s.q_start = s.k_start = 0;
    s.seqlen_q = p.seqlen_q;
    s.seqlen_k = p.seqlen_k;
    s.tma_batch = batch;
  }
  s.diag = s.seqlen_k - s.seqlen_q;
  return s;
}

// The index of row 0 of (batch, head) in LSE's layout: [batch, heads_q, seqlen_q], or with
// cu_seqlens [heads_q, total_q].
template <bool kVarlen>
__device__ __forceinline__ long long lse_row0(const AttnParams& p, const Sequence& s, int batch,
                                              int head) {
  return kVarlen ? static_cast<long long>(head) * p.cu_seqlens_q[p.batch] + s.q_start
                 : (static_cast<long long>(batch) * p.heads_q + head) * s.seqlen_q;
}

// A row's LSE, -inf for a row past the sequence end (`valid` false).
__device__ __forceinline__ float lse_of_row(const float* lse, long long index, bool valid) {
  return valid ? lse[index] : neg_inf();
}
// An LSE in the log2 domain, for P = exp2(scale_log2 S - LSE_log2): +inf for a row that saw no
// key or lies past the sequence end (LSE -inf), so that its P is 0.
__device__ __forceinline__ float lse_log2(float lse) {
  constexpr float kLog2e = 1.4426950408889634f;
  return lse == neg_inf() ? -neg_inf() : lse * kLog2e;
}
__device__ __forceinline__ float lse_log2_of_row(const float* lse, long long index, bool valid) {
  return lse_log2(lse_of_row(lse, index, valid));
}

}  // namespace fj
