// The non-deterministic backward's fp32 dQ accumulator (BwdParams::dq_accum): where a query
// row's head_dim_qk floats lie, for the launches that zero it, add to it and convert it.
#pragma once

#include "../kernels/bwd_params.cuh"

namespace fj {

// Row r (within its sequence) of `head`: rows are numbered across the batch as the packed
// varlen tensors number them (batch b's first row is b * seqlen_q without cu_seqlens).
template <class Cfg>
__device__ __forceinline__ float* dq_accum_row(const BwdParams& p, int batch, int q_start,
                                               int head, int r) {
  const long long row = Cfg::kVarlen ? q_start + r : static_cast<long long>(batch) * p.seqlen_q + r;
  return p.dq_accum + (row * p.heads_q + head) * Cfg::kHeadDimQk;
}

}  // namespace fj
