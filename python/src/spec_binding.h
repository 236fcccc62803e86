// _core.Spec: flashjit::Spec, read-only from Python; made by its own parsers (from_yaml,
// from_file) so that every rule and every error message is the C++ one.
#pragma once

#include <nanobind/nanobind.h>

namespace flashjit::py {

void bind_spec(nanobind::module_& module);

}  // namespace flashjit::py
