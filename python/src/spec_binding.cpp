#include "python/src/spec_binding.h"

#include <nanobind/stl/string.h>

#include "flashjit/flashjit.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashjit::py {

void bind_spec(nb::module_& m) {
  nb::class_<Spec>(m, "Spec",
                   "A validated kernel spec (configs/README.md has every field). Make one with "
                   "Spec.from_yaml / Spec.from_file or flashjit.spec(dict | text | path).")
      .def_static("from_yaml", &Spec::from_yaml, "text"_a, "source"_a = "<string>",
                  "Parses and validates YAML text; `source` names it in error messages "
                  "(SpecError: source:line:column and the field).")
      .def_static("from_file", &Spec::from_file, "path"_a,
                  "Reads, parses and validates a YAML file (IoError if it cannot be read).")
      .def("validate", &Spec::validate, "Raises SpecError naming the field out of range.")
      .def("to_yaml", &Spec::to_yaml,
           "The resolved spec as YAML, every field present (what `flashjit check` prints).")
      .def("__repr__", [](const Spec& s) { return "<flashjit.Spec " + s.name + ">"; })
      .def_ro("name", &Spec::name)
      .def_ro("head_dim_qk", &Spec::head_dim_qk)
      .def_ro("head_dim_v", &Spec::head_dim_v)
      .def_prop_ro("dtype", [](const Spec& s) { return to_string(s.dtype); }, "\"fp16\" or \"bf16\"")
      .def_ro("causal", &Spec::causal)
      .def_prop_ro("mask", [](const Spec& s) { return to_string(s.mask); },
                   "\"none\", \"sliding_window\", \"block_sparse\" or \"pattern\"")
      .def_ro("window_left", &Spec::window_left)
      .def_ro("window_right", &Spec::window_right)
      .def_ro("block_q", &Spec::block_q)
      .def_ro("block_k", &Spec::block_k)
      .def_prop_ro("arch", [](const Spec& s) { return to_string(s.arch); },
                   "\"auto\", \"sm80\" or \"sm90a\"")
      .def_ro("warp_specialization", &Spec::warp_specialization)
      .def_ro("deterministic", &Spec::deterministic);
}

}  // namespace flashjit::py
