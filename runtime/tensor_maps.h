// The TMA tensor maps the sm90 kernels load through: each tensor seen as 4-d
// {head_dim, seqlen, heads, batch}, boxes of 64 columns (one 128-byte swizzled panel) by the
// rows one copy brings (a consumer's query rows, a key block; the backward's key block and
// query tile).
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

struct BackwardTensorMaps {
  TensorMap q, k, v, d_o;
};

// The four maps of a backward launch the plan's sm90 kernel serves: Q and dO in boxes of the
// plan's query tile (block_m rows), K and V of its key block (block_n rows).
BackwardTensorMaps make_tensor_maps(Driver& driver, const gen::Plan& plan,
                                    const BackwardArgs& args);

}  // namespace flashjit::rt
