// The library's free functions: compiles without a GPU, bundles, devices, the environment as
// runtime/env.cpp reads it, the version, and block layouts from dense block matrices.
#pragma once

#include <nanobind/nanobind.h>

namespace flashjit::py {

void bind_library(nanobind::module_& module);

}  // namespace flashjit::py
