// Checks a forward call's arguments against its plan and packs the kernel parameters.
#pragma once

#include "flashjit/flashjit.h"
#include "generator/plan.h"
#include "templates/kernels/fwd_params.cuh"

namespace flashjit::rt {

// Throws Error(Shape) naming the argument that does not fit (null pointer, heads_q not a
// multiple of heads_kv, a non-positive size, ...).
void check_forward_args(const Spec& spec, const ForwardArgs& args);

// Throws Error(Shape) "<operation>: <tensor>_stride.<dim> = ..." for a stride below 1 along a
// dimension of more than one element (the only dimensions whose stride matters).
void check_tensor_strides(const char* operation, const char* tensor, const TensorStrides& stride,
                          int batch, int seqlen, int heads);

FwdParams make_fwd_params(const gen::Plan& plan, const ForwardArgs& args);

// The parameters every attention kernel reads (AttnParams) from a forward call's arguments:
// tensors, strides, shape, the scale, the block-sparse layout and varlen fields.
void fill_attn_params(AttnParams& params, const Spec& spec, const ForwardArgs& args);
// The block-sparse layout and varlen fields of `args` into `params` (fill_attn_params calls it).
void fill_mask_params(AttnParams& params, const ForwardArgs& args);

}  // namespace flashjit::rt
