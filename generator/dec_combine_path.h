// The dec_combine path: decode's second launch when the keys were split, merging each query
// row's partial O and LSE (templates/kernels/dec_combine.cuh), on every target.
#pragma once

#include "generator/kernel_path.h"

namespace flashjit::gen {

extern const KernelPathInfo kDecCombinePath;

}  // namespace flashjit::gen
