// flashjit::Error as Python exceptions: one class per ErrorKind under a common flashjit.Error,
// so that `except flashjit.SpecError` catches exactly what the C++ side calls a spec error.
#pragma once

#include <nanobind/nanobind.h>

namespace flashjit::py {

// Creates the exception classes in `module` and registers the translator of flashjit::Error.
void bind_errors(nanobind::module_& module);

}  // namespace flashjit::py
