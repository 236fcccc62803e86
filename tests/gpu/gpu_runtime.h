// The one Runtime the GPU tests share (so compiled kernels are reused across test cases).
#pragma once

#include "flashjit/flashjit.h"

namespace flashjit::gpu_test {

Runtime& gpu_runtime();

}  // namespace flashjit::gpu_test
