// The bwd_dq_convert path: the backward's last launch after a dK/dV kernel that accumulated
// dQ (bwd_dkdv_dq_sm90), dQ = softmax_scale * dq_accum in dQ's layout
// (templates/kernels/bwd_dq_convert.cuh). It serves the calls that kernel serves.
#pragma once

#include "generator/kernel_path.h"

namespace flashjit::gen {

extern const KernelPathInfo kBwdDqConvertPath;

}  // namespace flashjit::gen
