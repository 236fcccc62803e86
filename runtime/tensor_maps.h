// The TMA tensor maps the sm90 kernel loads Q, K and V through: each tensor seen as 4-d
// {head_dim, seqlen, heads, batch}, boxes of 64 columns (one 128-byte swizzled panel) by the
// rows one copy brings (the CTA's 128 query rows, a key block).
#pragma once

#include "flashjit/flashjit.h"
#include "generator/plan.h"
#include "runtime/driver.h"

namespace flashjit::rt {

struct alignas(64) TensorMap {
  unsigned char bytes[kTensorMapBytes];
};

struct ForwardTensorMaps {
  TensorMap q, k, v;
};

// Encodes the three maps for a call the plan's sm90 kernel serves.
ForwardTensorMaps make_tensor_maps(Driver& driver, const gen::Plan& plan, const ForwardArgs& args);

}  // namespace flashjit::rt
