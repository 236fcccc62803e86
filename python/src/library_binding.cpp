#include "python/src/library_binding.h"

#include <cstdint>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "flashjit/flashjit.h"
#include "python/src/reports.h"
#include "python/src/runtimes.h"
#include "runtime/env.h"
#include "runtime/tune_db.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashjit::py {
namespace {

using Int32Array = nb::ndarray<nb::numpy, int32_t>;

// A host vector handed to NumPy, which frees it with the array.
Int32Array numpy_array(std::vector<int32_t> values, std::vector<size_t> shape) {
  auto* owned = new std::vector<int32_t>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<int32_t>*>(p); });
  return Int32Array(owned->data(), shape.size(), shape.data(), owner);
}

nb::tuple layout_from_dense(nb::ndarray<nb::ro, uint8_t, nb::ndim<4>, nb::c_contig, nb::device::cpu> visible) {
  const auto extent = [&](size_t d) { return static_cast<int>(visible.shape(d)); };
  const std::vector<uint8_t> cells(visible.data(), visible.data() + visible.size());
  BlockLayout layout = block_layout_from_dense(cells, extent(0), extent(1), extent(2), extent(3));
  const size_t b = layout.batch, h = layout.heads, q = layout.q_blocks, m = layout.max_blocks;
  return nb::make_tuple(numpy_array(std::move(layout.counts), {b, h, q}),
                        numpy_array(std::move(layout.indices), {b, h, q, m}));
}

nb::dict environment() {
  nb::dict env;
  env["cache_dir"] = rt::cache_dir();
  env["cache_disabled"] = rt::cache_disabled();
  env["dump_dir"] = rt::dump_dir();
  env["verbose"] = rt::verbose_enabled();
  env["tune_db"] = tune::default_db_path();
  env["nvrtc_library"] = rt::nvrtc_library();
  return env;
}

}  // namespace

void bind_library(nb::module_& m) {
  m.def("version", &version, "The generator version (part of every cache key).");
  m.def(
      "compile_only",
      [](const Spec& spec, const std::string& target) {
        CompileReport report;
        {
          nb::gil_scoped_release release;
          report = runtime_for(0).compile(spec, target);
        }
        return report_dict(report);
      },
      "spec"_a, "target"_a, "Runtime::compile: the forward for `target`, no GPU needed.");
  m.def(
      "compile_backward_only",
      [](const Spec& spec, const std::string& target) {
        std::vector<CompileReport> reports;
        {
          nb::gil_scoped_release release;
          reports = runtime_for(0).compile_backward(spec, target);
        }
        return report_list(reports);
      },
      "spec"_a, "target"_a, "Runtime::compile_backward: the backward's kernels, in launch order.");
  m.def("register_bundle_file", &register_bundle_file, "path"_a,
        "Registers a bundle file (flashjit build); IoError if corrupt, UsageError if of "
        "another generator version.");
  m.def(
      "register_bundle",
      [](nb::bytes data, const std::string& name) { register_bundle(data.c_str(), data.size(), name); },
      "data"_a, "name"_a, "Registers a bundle held in memory; `name` names it in messages.");
  m.def(
      "has_device", [](int device) { return runtime_for(device).has_device(); }, "device"_a = 0,
      "True when a CUDA driver and GPU `device` are present (takes no GPU memory).");
  m.def(
      "device_info",
      [](int device) {
        const DeviceInfo info = runtime_for(device).device();
        nb::dict out;
        out["name"] = info.name;
        out["compute_capability"] = nb::make_tuple(info.cc_major, info.cc_minor);
        out["sm_count"] = info.sm_count;
        out["driver_version"] = info.driver_version;
        return out;
      },
      "device"_a = 0, "GPU `device`'s name, compute capability, SM count and driver version.");
  m.def("environment", &environment,
        "The FLASHJIT_* settings as the library reads them now, defaults resolved.");
  m.def("block_layout_from_dense", &layout_from_dense, "visible"_a,
        "flashjit::block_layout_from_dense of a [batch, heads, q_blocks, k_blocks] uint8 host "
        "array: (block_counts, block_indices) as int32 NumPy arrays.");
}

}  // namespace flashjit::py
