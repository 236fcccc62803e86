#include "python/src/errors.h"

#include <array>
#include <string>

#include "flashjit/flashjit.h"

namespace nb = nanobind;

namespace flashjit::py {
namespace {

struct ErrorClass {
  ErrorKind kind;
  const char* name;
  const char* doc;
};

// In the order of flashjit::ErrorKind, so that a kind indexes its class.
constexpr std::array<ErrorClass, 8> kErrorClasses = {{
    {ErrorKind::Spec, "SpecError",
     "The spec (YAML text, file or dict) is invalid; the message names file:line:column and "
     "the field."},
    {ErrorKind::Shape, "ShapeError",
     "A tensor's device, dtype, shape, strides or pointer does not fit the kernel."},
    {ErrorKind::Compile, "CompileError",
     "NVRTC rejected the generated source, or a kernel spills registers or is missing from "
     "the bundles when only pre-built kernels are allowed."},
    {ErrorKind::Driver, "DriverError", "A CUDA driver call failed."},
    {ErrorKind::NoDevice, "NoDeviceError", "No CUDA driver or GPU on this machine."},
    {ErrorKind::Cache, "CacheError", "The on-disk kernel cache could not be used."},
    {ErrorKind::Io, "IoError", "A file could not be read or written (or a bundle is corrupt)."},
    {ErrorKind::Usage, "UsageError", "Something was asked that flashjit does not support."},
}};

// Owned by the module for the life of the interpreter (a translator may run until exit).
std::array<PyObject*, kErrorClasses.size()> g_classes{};

void translate(const std::exception_ptr& thrown, void*) {
  try {
    std::rethrow_exception(thrown);
  } catch (const Error& error) {
    PyErr_SetString(g_classes[static_cast<size_t>(error.kind())], error.what());
  }
}

}  // namespace

void bind_errors(nb::module_& module) {
  PyObject* base = PyErr_NewExceptionWithDoc(
      "flashjit.Error",
      "Base class of every flashjit error; its subclass says the kind (SpecError, ShapeError, "
      "...) and `kind` holds the C++ ErrorKind's name (\"spec\", \"shape\", ...).",
      PyExc_RuntimeError, nullptr);
  if (base == nullptr) throw nb::python_error();
  module.attr("Error") = nb::steal(base);
  for (size_t i = 0; i < kErrorClasses.size(); ++i) {
    const ErrorClass& c = kErrorClasses[i];
    const std::string qualified = std::string("flashjit.") + c.name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), c.doc, base, nullptr);
    if (cls == nullptr) throw nb::python_error();
    nb::handle(cls).attr("kind") = to_string(c.kind);
    g_classes[static_cast<size_t>(c.kind)] = cls;
    module.attr(c.name) = nb::borrow(cls);  // g_classes keeps the creating reference
  }
  nb::register_exception_translator(translate);
}

}  // namespace flashjit::py
