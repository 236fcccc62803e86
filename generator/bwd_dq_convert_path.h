// The bwd_dq_convert path: a non-deterministic backward's last launch, dQ in the element type
// from the fp32 accumulator (templates/kernels/bwd_dq_convert.cuh), on every target.
#pragma once

#include "generator/kernel_path.h"

namespace flashjit::gen {

extern const KernelPathInfo kBwdDqConvertPath;

}  // namespace flashjit::gen
