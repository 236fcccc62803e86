// The bwd_pre path: the backward's first launch, D = rowsum(dO * O) for every query row
// (templates/kernels/bwd_pre.cuh), on every target.
#pragma once

#include "generator/kernel_path.h"

namespace flashjit::gen {

extern const KernelPathInfo kBwdPrePath;

}  // namespace flashjit::gen
