// Checks a forward call's arguments against its plan and packs the kernel parameters.
#pragma once

#include "flashjit/flashjit.h"
#include "generator/plan.h"
#include "templates/kernels/fwd_params.cuh"

namespace flashjit::rt {

// Throws Error(Shape) naming the argument that does not fit (null pointer, heads_q not a
// multiple of heads_kv, a non-positive size, ...).
void check_forward_args(const Spec& spec, const ForwardArgs& args);

FwdParams make_fwd_params(const gen::Plan& plan, const ForwardArgs& args);

// The block-sparse layout and varlen fields of `args` into `params` (make_fwd_params calls it).
void fill_mask_params(FwdParams& params, const ForwardArgs& args);

}  // namespace flashjit::rt
