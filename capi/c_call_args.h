// The flat arguments of flashjit_c.h's launch functions as the C++ API's ForwardArgs and
// BackwardArgs. A header of its own so that the CPU tests can check, without a GPU, that
// every pointer, stride and mask field lands in the field of its name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "flashjit/flashjit.h"
#include "flashjit/flashjit_c.h"

namespace flashjit::capi {

inline Error null_argument(const char* function, const char* argument) {
  return Error(ErrorKind::Usage, std::string(function) + ": " + argument + " is null");
}

inline TensorStrides strides_of(const int64_t* s, const char* function, const char* name) {
  if (s == nullptr) throw null_argument(function, name);
  return {s[0], s[1], s[2]};
}

// The tensors of a forward call; null tensors are left for Kernel::forward to refuse.
struct ForwardTensors {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
};

// The tensors of a backward call: the forward's (o and lse now read, not written), dO in,
// dQ, dK, dV out.
struct BackwardTensors {
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const float* lse;
  const void* d_o;
  void* d_q;
  void* d_k;
  void* d_v;
};

struct CallShape {
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
};

// `strides` holds q, k, v and o's {batch, seq, head}; `mask` may be null.
inline ForwardArgs forward_args(const char* function, const ForwardTensors& t,
                                const CallShape& shape, const int64_t* const strides[4],
                                float softmax_scale, const flashjit_mask_args* mask) {
  ForwardArgs args;
  args.q = t.q;
  args.k = t.k;
  args.v = t.v;
  args.o = t.o;
  args.lse = t.lse;
  args.batch = shape.batch;
  args.heads_q = shape.heads_q;
  args.heads_kv = shape.heads_kv;
  args.seqlen_q = shape.seqlen_q;
  args.seqlen_k = shape.seqlen_k;
  args.q_stride = strides_of(strides[0], function, "q_strides");
  args.k_stride = strides_of(strides[1], function, "k_strides");
  args.v_stride = strides_of(strides[2], function, "v_strides");
  args.o_stride = strides_of(strides[3], function, "o_strides");
  args.softmax_scale = softmax_scale;
  if (mask != nullptr) {
    args.block_counts = mask->block_counts;
    args.block_indices = mask->block_indices;
    args.layout_batch = mask->layout_batch;
    args.layout_heads = mask->layout_heads;
    args.layout_q_blocks = mask->layout_q_blocks;
    args.layout_max_blocks = mask->layout_max_blocks;
    args.cu_seqlens_q = mask->cu_seqlens_q;
    args.cu_seqlens_k = mask->cu_seqlens_k;
    args.total_q = mask->total_q;
    args.total_k = mask->total_k;
  }
  return args;
}

// `strides` holds q, k, v, o, d_o, d_q, d_k and d_v's {batch, seq, head}; `mask` may be null.
inline BackwardArgs backward_args(const char* function, const BackwardTensors& t,
                                  const CallShape& shape, const int64_t* const strides[8],
                                  float softmax_scale, const flashjit_mask_args* mask,
                                  void* workspace, size_t workspace_bytes) {
  BackwardArgs args;
  // ForwardArgs holds o and lse mutable because the forward writes them; the backward only
  // reads them.
  const ForwardTensors forward{t.q, t.k, t.v, const_cast<void*>(t.o), const_cast<float*>(t.lse)};
  args.forward = forward_args(function, forward, shape, strides, softmax_scale, mask);
  args.d_o = t.d_o;
  args.d_q = t.d_q;
  args.d_k = t.d_k;
  args.d_v = t.d_v;
  args.d_o_stride = strides_of(strides[4], function, "d_o_strides");
  args.d_q_stride = strides_of(strides[5], function, "d_q_strides");
  args.d_k_stride = strides_of(strides[6], function, "d_k_strides");
  args.d_v_stride = strides_of(strides[7], function, "d_v_strides");
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  return args;
}

// The KV-cache fields of a forward call.
inline void set_kv_cache(ForwardArgs& args, const flashjit_kv_cache_args& cache) {
  args.cache_seqlens = cache.cache_seqlens;
  args.block_table = cache.block_table;
  args.page_size = cache.page_size;
  args.max_pages = cache.max_pages;
  args.num_pages = cache.num_pages;
}

}  // namespace flashjit::capi
