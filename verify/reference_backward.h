// The CPU reference of the attention backward pass, in reference.h's conventions (masks,
// block masks, varlen, GQA, strided views, threads): the gradients of reference_forward's O
// for an output gradient dO (O's layout: [batch, seqlen_q, heads_q, d_v], or packed
// [total_q, heads_q, d_v] for varlen):
//   P = softmax(scale Q Kᵀ), dP = dO Vᵀ, D = rowsum(dO ∘ O) = rowsum(P ∘ dP),
//   dS = P ∘ (dP - D), dQ = scale dS K, dK = scale dSᵀ Q, dV = Pᵀ dO,
// dK / dV summed over the query heads of each GQA group; a row that sees no key has P = 0
// and so contributes nothing (its dQ is 0).
#pragma once

#include <vector>

#include "flashjit/flashjit.h"
#include "verify/reference.h"

namespace flashjit::verify {

// Contiguous tensors in Q's, K's and V's logical layouts: dq [batch, seqlen_q, heads_q,
// d_qk], dk [batch, seqlen_k, heads_kv, d_qk], dv [batch, seqlen_k, heads_kv, d_v] (packed
// [total, heads, dim] for varlen).
struct ReferenceGradients {
  std::vector<double> dq, dk, dv;
  // The fp32 rounding an element of dQ / dK may carry from the cancellation in
  // dS = P ∘ (dP - D), dP and D being fp32 dot products of about equal size: 2^-23 times the
  // largest over the elements of
  //   dQ row i:  scale Σ_j P_ij ‖dO_i‖ (‖V_j‖ + max ‖V‖) max_d |K_jd|
  //   dK key j:  Σ_i P_ij ‖dO_i‖ (‖V_j‖ + max ‖V‖) max_d |scale Q_id|   (over the GQA group)
  // A correct kernel's dQ / dK can be that far off where dS is exactly 0 (every row sees one
  // key), and there FlashAttention's bound is 0.
  double dq_cancellation = 0, dk_cancellation = 0;
  // The largest over keys j of Σ_i P_ij max_d |scale Q_id| (over the GQA group): how far an
  // error δ in every D_i can move dK (dK_j = Σ_i P_ij (dP_ij - D_i) scale Q_i).
  double max_p_q_column = 0;
  // What rounding P and dS to a dtype of unit roundoff u (every backward does, before the
  // products) can do to the gradients: each rounded entry moves by at most u times itself,
  // about uniformly, so an element by a sum of independent terms whose standard deviation is
  // at most u / sqrt(3) times (the largest over elements, over the GQA group)
  //   dQ_id: |scale| sqrt(Σ_j dS_ij² K_jd²)   dK_jd: sqrt(Σ_i dS_ij² (scale Q_id)²)
  //   dV_jd: sqrt(Σ_i P_ij² dO_id²)
  // gradient_error_bound's floor (rounding_floor). fp64 reference only (0 from lowp_backward).
  double dq_rounding_spread = 0, dk_rounding_spread = 0, dv_rounding_spread = 0;
};

// In fp64. Runs on `threads` threads (0: all hardware threads), splitting over batch, heads
// and blocks of query rows (dQ) or of keys (dK, dV); the result does not depend on the count.
ReferenceGradients reference_backward(const AttentionProblem& problem, HostView q, HostView k,
                                      HostView v, HostView d_o, int threads = 0);

// The same computation as PyTorch's autograd of plain attention does it in a low dtype (the
// baseline of FlashAttention's gradient acceptance rule): inputs rounded to `dtype`, Q
// scaled and rounded first, every matrix product accumulated in fp32 and rounded to
// `dtype`, the softmax and its backward computed in fp32 and rounded, each GQA head's dK /
// dV rounded before the group's sum is (dK / dV of a repeated K / V).
ReferenceGradients lowp_backward(const AttentionProblem& problem, HostView q, HostView k,
                                 HostView v, HostView d_o, DType dtype, int threads = 0);

}  // namespace flashjit::verify
