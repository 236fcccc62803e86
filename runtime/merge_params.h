// Checks a merge call's arguments (Kernel::merge) and packs its kernel parameters.
#pragma once

#include "flashjit/flashjit.h"
#include "templates/kernels/merge_params.cuh"

namespace flashjit::rt {

// Throws Error(Shape) naming the argument that does not fit.
void check_merge_args(const Spec& spec, const MergeArgs& args);
MergeParams make_merge_params(const MergeArgs& args);

}  // namespace flashjit::rt
