// DLPack tensors (nanobind ndarrays) to the C++ API's ForwardArgs / BackwardArgs: every check
// of device, dtype, shape and strides against the spec that the C++ API cannot make itself
// (it sees pointers and sizes, not the tensors' extents). Failures are Error(Shape) with the
// tensor's name and what it should be, as the C++ API's own argument checks are.
#pragma once

#include <cstdint>
#include <optional>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "flashjit/flashjit.h"

namespace flashjit::py {

using InTensor = nanobind::ndarray<nanobind::ro>;  // read by the kernel
using OutTensor = nanobind::ndarray<>;             // written by the kernel

// What a call passes besides Q, K, V, O and LSE (ForwardArgs' masks and varlen fields).
struct CallOptions {
  float softmax_scale = 0.f;
  std::optional<InTensor> block_counts, block_indices;  // int32, [LB, LH, QB] and [LB, LH, QB, MB]
  std::optional<InTensor> cu_seqlens_q, cu_seqlens_k;   // int32, [batch + 1]
  int max_seqlen_q = 0, max_seqlen_k = 0;               // with cu_seqlens: the longest sequences
  // A KV cache (decode): each sequence's cached keys, int32 [batch]; a paged cache's block
  // table, int32 [batch, max_pages], with K/V then [num_pages, page_size, heads_kv, dim].
  std::optional<InTensor> cache_seqlens, block_table;
};

// The ForwardArgs of a call; `device` receives the CUDA ordinal every tensor is on.
ForwardArgs forward_args(const Spec& spec, const InTensor& q, const InTensor& k,
                         const InTensor& v, const OutTensor& o, const std::optional<OutTensor>& lse,
                         const CallOptions& options, int& device);

// The BackwardArgs of a call: the forward's tensors (lse required) and the gradients.
BackwardArgs backward_args(const Spec& spec, const InTensor& q, const InTensor& k,
                           const InTensor& v, const InTensor& o, const InTensor& lse,
                           const InTensor& d_o, const OutTensor& d_q, const OutTensor& d_k,
                           const OutTensor& d_v, const CallOptions& options, int& device);

// A workspace tensor (any dtype, contiguous, on `device`): its pointer and size in bytes.
void set_workspace(BackwardArgs& args, const OutTensor& workspace, int device);

}  // namespace flashjit::py
