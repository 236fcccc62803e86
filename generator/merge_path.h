// The merge path: two partial attention results over disjoint key sets into one
// (templates/kernels/merge.cuh, Kernel::merge), on every target.
#pragma once

#include "generator/kernel_path.h"

namespace flashjit::gen {

extern const KernelPathInfo kMergePath;

}  // namespace flashjit::gen
