// flashjit._core: the C++ library (include/flashjit/flashjit.h) for Python. The pure-Python
// package python/flashjit/ builds the user's API on it; nothing here allocates tensors.
#include <nanobind/nanobind.h>

#include "python/src/errors.h"
#include "python/src/kernel_binding.h"
#include "python/src/library_binding.h"
#include "python/src/spec_binding.h"

NB_MODULE(_core, m) {
  m.doc() = "flashjit's C++ library; use the flashjit package, which wraps it.";
  flashjit::py::bind_errors(m);
  flashjit::py::bind_spec(m);
  flashjit::py::bind_kernel(m);
  flashjit::py::bind_library(m);
}
