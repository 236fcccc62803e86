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

// Can TMA load this call's Q, K and V? Base addresses and the sequence, head and batch
// strides (along dimensions of extent > 1) must be multiples of 16 bytes. A head is a
// dimension of its own, not a column offset: a box whose first column is not 16-byte
// aligned faults on Hopper (CUDA_ERROR_ILLEGAL_INSTRUCTION, seen on the H200 with heads of
// 200 bytes laid end to end), so head dim 100 with packed heads runs the sm80 kernel.
// A varlen call also needs its packed row counts (ForwardArgs total_q / total_k > 0).
bool tma_loadable(const ForwardArgs& args);

// Encodes the three maps for a call the plan's sm90 kernel serves.
ForwardTensorMaps make_tensor_maps(const gen::Plan& plan, const ForwardArgs& args);

}  // namespace flashjit::rt
