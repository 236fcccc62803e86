// _core.Kernel: one spec's kernel, made on each GPU the first time a call's tensors are there
// (the C++ Runtime::kernel needs a GPU; the spec alone does not), launched from DLPack tensors.
#pragma once

#include <nanobind/nanobind.h>

namespace flashjit::py {

void bind_kernel(nanobind::module_& module);

}  // namespace flashjit::py
