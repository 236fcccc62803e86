// Checks a backward call's arguments and packs the parameters its launches share.
#pragma once

#include <cstddef>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/plan.h"
#include "runtime/operation.h"
#include "templates/kernels/bwd_params.cuh"

namespace flashjit::rt {

// Throws Error(Shape) naming the argument that does not fit: the forward's checks, then the
// LSE and the gradients' pointers, alignment and strides, and a caller's workspace.
void check_backward_args(const Spec& spec, const BackwardArgs& args);

// The scratch the backward's launches pass between them, sized from the call: D (one float a
// query row and head, in LSE's layout).
std::vector<ScratchBuffer> backward_scratch(const ForwardArgs& args);

// The launches' parameters; `workspace` holds backward_scratch's buffers in order.
BwdParams make_bwd_params(const Spec& spec, const BackwardArgs& args, void* workspace);

}  // namespace flashjit::rt
