// The TMA tensor maps the sm90 kernel loads Q, K and V through, with boxes of 64 columns (one
// 128-byte swizzled panel) by the rows one copy brings (the CTA's 128 query rows, a key
// block). A tensor whose head stride is a multiple of 16 bytes is seen as 4-d {head_dim,
// seqlen, heads, batch}; otherwise (e.g. head dim 100 with packed heads: 200-byte steps) as
// {heads laid end to end, seqlen, 1, batch}, a head being a column offset. In that form the
// columns past a head's head_dim are the next head's: the kernel zeroes those it reads.
#pragma once

#include "flashjit/flashjit.h"
#include "generator/plan.h"
#include "runtime/driver.h"
#include "templates/fwd_params.cuh"

namespace flashjit::rt {

struct alignas(64) TensorMap {
  unsigned char bytes[kTensorMapBytes];
};

struct ForwardTensorMaps {
  TensorMap q, k, v;
};

// Can TMA load this call's Q, K and V? Their base addresses and their sequence and batch
// strides (along dimensions of extent > 1) must be multiples of 16 bytes; any head stride.
bool tma_loadable(const ForwardArgs& args);

// Encodes the three maps for a call the plan's sm90 kernel serves and sets the head steps
// (q_tma, k_tma, v_tma) and qk_pad_dirty of `params`.
ForwardTensorMaps make_tensor_maps(const gen::Plan& plan, const ForwardArgs& args,
                                   FwdParams& params);

}  // namespace flashjit::rt
