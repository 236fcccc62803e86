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
// LSE and the gradients' pointers, alignment and strides.
void check_backward_args(const Spec& spec, const BackwardArgs& args);

// The scratch the launches of `op` pass between them, sized from the call, in this order:
// D (one float a query row and head, in LSE's layout), then, when the dK/dV launch
// accumulates dQ, dq_accum (the launch's column splits' width in floats a row), and when it
// orders those adds, dq_turns (two counters a block of dq_accum); the runtime zeroes both.
std::vector<ScratchBuffer> backward_scratch(const OperationPlan& op, const ForwardArgs& args);
// Throws Error(Shape) if the caller's workspace (when not null) is smaller than `scratch`
// takes or not 256-byte aligned.
void check_backward_workspace(const BackwardArgs& args, const std::vector<ScratchBuffer>& scratch);

// The launches' parameters; `buffers` are where `scratch` (backward_scratch's, then any
// other) lies in the workspace, in order.
BwdParams make_bwd_params(const Spec& spec, const BackwardArgs& args,
                          const std::vector<ScratchBuffer>& scratch,
                          const std::vector<void*>& buffers);

}  // namespace flashjit::rt
