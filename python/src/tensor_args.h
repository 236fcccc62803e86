// A call's tensors to the C++ API's ForwardArgs / BackwardArgs: every check of device, dtype,
// shape and strides against the spec that the C++ API cannot make itself (it sees pointers and
// sizes, not the tensors' extents). Failures are Error(Shape) with the tensor's name and what
// it should be, as the C++ API's own argument checks are. The checks read TensorViews, which
// the binding makes from DLPack capsules (nanobind ndarrays) or from a producer's DLPack
// exchange API (python/src/dlpack_exchange.h): one set of checks and messages for both.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "flashjit/flashjit.h"

namespace flashjit::py {

using InTensor = nanobind::ndarray<nanobind::ro>;  // read by the kernel
using OutTensor = nanobind::ndarray<>;             // written by the kernel

// One tensor as the checks see it: its DLPack fields, strides in elements. Shape and strides
// are borrowed from the array described, which the caller keeps alive for the call.
struct TensorView {
  const char* name = "";
  void* data = nullptr;
  int32_t device_type = 0, device_id = 0;
  nanobind::dlpack::dtype dtype{};
  std::span<const int64_t> shape, strides;
};

// The view of a DLPack capsule's tensor (nanobind fills in strides a producer left out).
template <typename... Flags>
TensorView view_of(const char* name, const nanobind::ndarray<Flags...>& a) {
  const auto n = static_cast<size_t>(a.ndim());
  return {name, const_cast<void*>(static_cast<const void*>(a.data())), a.device_type(),
          a.device_id(), a.dtype(), {a.shape_ptr(), n}, {a.stride_ptr(), n}};
}

// What a call passes besides Q, K, V, O and LSE (ForwardArgs' masks and varlen fields).
struct CallOptions {
  float softmax_scale = 0.f;
  std::optional<TensorView> block_counts, block_indices;  // int32 [LB, LH, QB], [LB, LH, QB, MB]
  std::optional<TensorView> cu_seqlens_q, cu_seqlens_k;   // int32, [batch + 1]
  int max_seqlen_q = 0, max_seqlen_k = 0;  // with cu_seqlens: the longest sequences
  // A KV cache (decode): each sequence's cached keys, int32 [batch]; a paged cache's block
  // table, int32 [batch, max_pages], with K/V then [num_pages, page_size, heads_kv, dim].
  std::optional<TensorView> cache_seqlens, block_table;
};

struct ForwardTensors {
  TensorView q, k, v, o;
  std::optional<TensorView> lse;
};

// The forward's tensors (lse required) and the gradients.
struct BackwardTensors {
  TensorView q, k, v, o, lse, d_o, d_q, d_k, d_v;
};

// The ForwardArgs of a call; `device` receives the CUDA ordinal every tensor is on.
ForwardArgs forward_args(const Spec& spec, const ForwardTensors& tensors,
                         const CallOptions& options, int& device);

// The BackwardArgs of a call.
BackwardArgs backward_args(const Spec& spec, const BackwardTensors& tensors,
                           const CallOptions& options, int& device);

// A workspace tensor (any dtype, contiguous, on `device`) of `bytes` bytes.
void set_workspace(BackwardArgs& args, const TensorView& workspace, size_t bytes, int device);

}  // namespace flashjit::py
