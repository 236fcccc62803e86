// The row view of each tensor a TMA kernel loads (Q, K, V, dO): its base, [batch, seqlen,
// heads] strides and extents, and the head dim. A packed varlen tensor is one batch of its
// total rows (the kernel adds each sequence's start). The tensor maps, the TMA check of the
// call's traits and the staging copies all read the call through these views.
#pragma once

#include <cstdint>

#include "flashjit/flashjit.h"

namespace flashjit::rt {

struct TensorRows {
  const void* base = nullptr;
  TensorStrides stride;  // in elements
  int batch = 0, seqlen = 0, heads = 0, dim = 0;
};

TensorRows q_rows(const Spec& spec, const ForwardArgs& args);
TensorRows k_rows(const Spec& spec, const ForwardArgs& args);
TensorRows v_rows(const Spec& spec, const ForwardArgs& args);
TensorRows d_o_rows(const Spec& spec, const BackwardArgs& args);

}  // namespace flashjit::rt
