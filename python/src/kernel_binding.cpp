#include "python/src/kernel_binding.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include "generator/targets.h"
#include "python/src/dlpack_exchange.h"
#include "python/src/reports.h"
#include "python/src/runtimes.h"
#include "python/src/tensor_args.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashjit::py {
namespace {

class PyKernel {
 public:
  explicit PyKernel(Spec spec) : spec_(std::move(spec)) { spec_.validate(); }

  const Spec& spec() const { return spec_; }

  // The C++ kernel of GPU `device`, made on first use.
  std::shared_ptr<Kernel> on(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = kernels_.find(device);
    if (found != kernels_.end()) return found->second;
    // Made before it is stored: a GPU that cannot make it (NoDevice) leaves no entry behind.
    std::shared_ptr<Kernel> kernel = runtime_for(device).kernel(spec_);
    kernels_.emplace(device, kernel);
    return kernel;
  }

  void forward(const ForwardTensors& tensors, const CallOptions& options, uintptr_t stream) {
    int device = -1;
    const ForwardArgs args = forward_args(spec_, tensors, options, device);
    std::shared_ptr<Kernel> kernel = on(device);
    nb::gil_scoped_release release;  // a first call compiles: let other Python threads run
    kernel->forward(args, reinterpret_cast<void*>(stream));
  }

  void backward(const BackwardTensors& tensors, const CallOptions& options,
                const std::optional<OutTensor>& workspace, uintptr_t stream) {
    int device = -1;
    BackwardArgs args = backward_args(spec_, tensors, options, device);
    if (workspace)
      set_workspace(args, view_of("workspace", *workspace), workspace->nbytes(), device);
    std::shared_ptr<Kernel> kernel = on(device);
    nb::gil_scoped_release release;
    kernel->backward(args, reinterpret_cast<void*>(stream));
  }

  size_t backward_workspace_bytes(const BackwardTensors& tensors, const CallOptions& options) {
    int device = -1;
    const BackwardArgs args = backward_args(spec_, tensors, options, device);
    return on(device)->backward_workspace_bytes(args);
  }

  // Runtime::compile (and compile_backward) of GPU `device`'s runtime, for its own target
  // unless one is named: the same in-memory cache as the kernel's calls, so the first call
  // with 16-byte aligned tensors and the spec's (or heuristic) tiles compiles nothing more.
  nb::list compile(int device, const std::optional<std::string>& target, bool backward) {
    Runtime& runtime = runtime_for(device);
    std::string chosen;
    if (target) {
      chosen = *target;
    } else {
      const DeviceInfo info = runtime.device();  // Error(NoDevice) without a GPU
      chosen = gen::target_for_device(info.cc_major, info.cc_minor);
    }
    std::vector<CompileReport> reports;
    {
      nb::gil_scoped_release release;
      reports.push_back(runtime.compile(spec_, chosen));
      if (backward) {
        for (CompileReport& r : runtime.compile_backward(spec_, chosen)) reports.push_back(std::move(r));
      }
    }
    return report_list(reports);
  }

  nb::list reports() {
    std::vector<CompileReport> all;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [device, kernel] : kernels_)
      for (CompileReport& r : kernel->reports()) all.push_back(std::move(r));
    return report_list(all);
  }

 private:
  Spec spec_;
  std::mutex mutex_;
  std::map<int, std::shared_ptr<Kernel>> kernels_;
};

template <typename Array>
std::optional<TensorView> optional_view(const char* name, const std::optional<Array>& a) {
  return a ? std::optional<TensorView>(view_of(name, *a)) : std::nullopt;
}

// The options of a call through DLPack capsules; the views borrow from the arrays, which
// live until the bound function returns.
CallOptions call_options(float softmax_scale, const std::optional<InTensor>& block_counts,
                         const std::optional<InTensor>& block_indices,
                         const std::optional<InTensor>& cu_seqlens_q,
                         const std::optional<InTensor>& cu_seqlens_k, int max_seqlen_q,
                         int max_seqlen_k,
                         const std::optional<InTensor>& cache_seqlens = std::nullopt,
                         const std::optional<InTensor>& block_table = std::nullopt) {
  return {softmax_scale,
          optional_view("block_counts", block_counts),
          optional_view("block_indices", block_indices),
          optional_view("cu_seqlens_q", cu_seqlens_q),
          optional_view("cu_seqlens_k", cu_seqlens_k),
          max_seqlen_q,
          max_seqlen_k,
          optional_view("cache_seqlens", cache_seqlens),
          optional_view("block_table", block_table)};
}

BackwardTensors backward_tensors(const InTensor& q, const InTensor& k, const InTensor& v,
                                 const InTensor& o, const InTensor& lse, const InTensor& d_o,
                                 const OutTensor& d_q, const OutTensor& d_k, const OutTensor& d_v) {
  return {view_of("q", q),     view_of("k", k),     view_of("v", v),
          view_of("o", o),     view_of("lse", lse), view_of("d_o", d_o),
          view_of("d_q", d_q), view_of("d_k", d_k), view_of("d_v", d_v)};
}

// The tensors of one call read through their type's DLPack exchange API
// (python/src/dlpack_exchange.h), all of one framework: the first tensor's.
class ExchangeReader {
 public:
  // False when `object` has no exchange API, or another framework's than the call's first
  // tensor, or its producer cannot describe it (then no Python error is left set).
  bool read(nb::handle object, const char* name, TensorView& view) {
    PyTypeObject* type = Py_TYPE(object.ptr());
    if (type != type_) {
      const DLPackExchangeAPI* api = exchange_api_of(object);
      if (api == nullptr || (api_ != nullptr && api != api_)) return false;
      api_ = api;
      type_ = type;
    }
    nb::dlpack::dltensor t;
    if (api_->dltensor_from_py_object_no_sync(object.ptr(), &t) != 0) {
      PyErr_Clear();
      return false;
    }
    // DLPack allows leaving out a compact tensor's strides; the capsule path fills them in.
    if (t.ndim > 0 && t.strides == nullptr) return false;
    const auto n = static_cast<size_t>(t.ndim);
    view = {name,           static_cast<char*>(t.data) + t.byte_offset,
            t.device.device_type, t.device.device_id,
            t.dtype,        {t.shape, n},
            {t.strides, n}};
    return true;
  }

  // None is an option left out.
  bool read(nb::handle object, const char* name, std::optional<TensorView>& view) {
    return object.is_none() || read(object, name, view.emplace());
  }

  // The framework's current stream on the device of `t` (0 for memory that is not CUDA, which
  // the checks then refuse); false when the framework cannot say.
  bool current_stream(const TensorView& t, uintptr_t& stream) const {
    void* current = nullptr;
    if (t.device_type == nb::device::cuda::value &&
        api_->current_work_stream(t.device_type, t.device_id, &current) != 0) {
      PyErr_Clear();
      return false;
    }
    stream = reinterpret_cast<uintptr_t>(current);
    return true;
  }

 private:
  const DLPackExchangeAPI* api_ = nullptr;
  PyTypeObject* type_ = nullptr;
};

// Kernel.forward_exchange: PyKernel::forward on tensors read through the exchange API, the
// arguments positional and as forward() takes them, but `stream` None for the framework's
// current stream. Returns false, having checked and run nothing, where a tensor cannot be read
// so or a number does not convert: the caller then passes DLPack capsules to forward(), which
// raises for such arguments what it always did.
bool forward_exchange(PyKernel& self, nb::handle q, nb::handle k, nb::handle v, nb::handle o,
                      nb::handle lse, nb::handle softmax_scale, nb::handle block_counts,
                      nb::handle block_indices, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k,
                      nb::handle max_seqlen_q, nb::handle max_seqlen_k, nb::handle cache_seqlens,
                      nb::handle block_table, nb::handle stream) {
  ExchangeReader reader;
  ForwardTensors tensors;
  CallOptions options;
  uintptr_t stream_handle = 0;
  const bool read =
      reader.read(q, "q", tensors.q) && reader.read(k, "k", tensors.k) &&
      reader.read(v, "v", tensors.v) && reader.read(o, "o", tensors.o) &&
      reader.read(lse, "lse", tensors.lse) &&
      reader.read(block_counts, "block_counts", options.block_counts) &&
      reader.read(block_indices, "block_indices", options.block_indices) &&
      reader.read(cu_seqlens_q, "cu_seqlens_q", options.cu_seqlens_q) &&
      reader.read(cu_seqlens_k, "cu_seqlens_k", options.cu_seqlens_k) &&
      reader.read(cache_seqlens, "cache_seqlens", options.cache_seqlens) &&
      reader.read(block_table, "block_table", options.block_table) &&
      nb::try_cast(softmax_scale, options.softmax_scale) &&
      nb::try_cast(max_seqlen_q, options.max_seqlen_q) &&
      nb::try_cast(max_seqlen_k, options.max_seqlen_k) &&
      (stream.is_none() ? reader.current_stream(tensors.q, stream_handle)
                        : nb::try_cast(stream, stream_handle));
  if (!read) return false;
  self.forward(tensors, options, stream_handle);
  return true;
}

}  // namespace

void bind_kernel(nb::module_& m) {
  nb::class_<PyKernel>(m, "Kernel",
                       "The C++ kernel of one spec (flashjit::Kernel) on every GPU it is called "
                       "on; flashjit.Kernel wraps it with output allocation and streams.")
      .def(nb::init<Spec>(), "spec"_a)
      .def_prop_ro("spec", &PyKernel::spec, nb::rv_policy::copy)
      .def(
          "forward",
          [](PyKernel& self, const InTensor& q, const InTensor& k, const InTensor& v,
             const OutTensor& o, std::optional<OutTensor> lse, float softmax_scale,
             std::optional<InTensor> block_counts, std::optional<InTensor> block_indices,
             std::optional<InTensor> cu_seqlens_q, std::optional<InTensor> cu_seqlens_k,
             int max_seqlen_q, int max_seqlen_k, std::optional<InTensor> cache_seqlens,
             std::optional<InTensor> block_table, uintptr_t stream) {
            self.forward({view_of("q", q), view_of("k", k), view_of("v", v), view_of("o", o),
                          optional_view("lse", lse)},
                         call_options(softmax_scale, block_counts, block_indices, cu_seqlens_q,
                                      cu_seqlens_k, max_seqlen_q, max_seqlen_k, cache_seqlens,
                                      block_table),
                         stream);
          },
          "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a.none() = nb::none(), nb::kw_only(),
          "softmax_scale"_a = 0.f, "block_counts"_a.none() = nb::none(),
          "block_indices"_a.none() = nb::none(), "cu_seqlens_q"_a.none() = nb::none(),
          "cu_seqlens_k"_a.none() = nb::none(), "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0,
          "cache_seqlens"_a.none() = nb::none(), "block_table"_a.none() = nb::none(),
          "stream"_a = 0,
          "Kernel::forward on `stream` (a CUstream as an integer, 0: the default stream) with "
          "the tensors' device, dtype, shapes and strides checked against the spec; a KV "
          "cache (cache_seqlens, block_table) runs decode.")
      .def("forward_exchange", &forward_exchange, "q"_a.none(), "k"_a.none(), "v"_a.none(),
           "o"_a.none(), "lse"_a.none(), "softmax_scale"_a.none(), "block_counts"_a.none(),
           "block_indices"_a.none(), "cu_seqlens_q"_a.none(), "cu_seqlens_k"_a.none(),
           "max_seqlen_q"_a.none(), "max_seqlen_k"_a.none(), "cache_seqlens"_a.none(),
           "block_table"_a.none(), "stream"_a.none(),
           "forward() on tensors read through their type's DLPack C exchange API "
           "(__dlpack_c_exchange_api__, e.g. torch.Tensor's), forward()'s arguments all "
           "positional, with stream None for the framework's current stream on q's GPU. "
           "Returns False, having run nothing, where a "
           "tensor has no such API (or another framework's) or a number does not convert: "
           "then call forward() with DLPack capsules.")
      .def(
          "backward",
          [](PyKernel& self, const InTensor& q, const InTensor& k, const InTensor& v,
             const InTensor& o, const InTensor& lse, const InTensor& d_o, const OutTensor& d_q,
             const OutTensor& d_k, const OutTensor& d_v, float softmax_scale,
             std::optional<InTensor> block_counts, std::optional<InTensor> block_indices,
             std::optional<InTensor> cu_seqlens_q, std::optional<InTensor> cu_seqlens_k,
             int max_seqlen_q, int max_seqlen_k, std::optional<OutTensor> workspace,
             uintptr_t stream) {
            self.backward(backward_tensors(q, k, v, o, lse, d_o, d_q, d_k, d_v),
                          call_options(softmax_scale, block_counts, block_indices, cu_seqlens_q,
                                       cu_seqlens_k, max_seqlen_q, max_seqlen_k),
                          workspace, stream);
          },
          "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "d_o"_a, "d_q"_a, "d_k"_a, "d_v"_a, nb::kw_only(),
          "softmax_scale"_a = 0.f, "block_counts"_a.none() = nb::none(),
          "block_indices"_a.none() = nb::none(), "cu_seqlens_q"_a.none() = nb::none(),
          "cu_seqlens_k"_a.none() = nb::none(), "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0,
          "workspace"_a.none() = nb::none(), "stream"_a = 0,
          "Kernel::backward: d_q, d_k, d_v from the forward's q, k, v, o, lse and d_o; without "
          "a workspace the runtime takes one from the GPU's stream-ordered pool.")
      .def(
          "backward_workspace_bytes",
          [](PyKernel& self, const InTensor& q, const InTensor& k, const InTensor& v,
             const InTensor& o, const InTensor& lse, const InTensor& d_o, const OutTensor& d_q,
             const OutTensor& d_k, const OutTensor& d_v, float softmax_scale,
             std::optional<InTensor> block_counts, std::optional<InTensor> block_indices,
             std::optional<InTensor> cu_seqlens_q, std::optional<InTensor> cu_seqlens_k,
             int max_seqlen_q, int max_seqlen_k) {
            return self.backward_workspace_bytes(
                backward_tensors(q, k, v, o, lse, d_o, d_q, d_k, d_v),
                call_options(softmax_scale, block_counts, block_indices, cu_seqlens_q,
                             cu_seqlens_k, max_seqlen_q, max_seqlen_k));
          },
          "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "d_o"_a, "d_q"_a, "d_k"_a, "d_v"_a, nb::kw_only(),
          "softmax_scale"_a = 0.f, "block_counts"_a.none() = nb::none(),
          "block_indices"_a.none() = nb::none(), "cu_seqlens_q"_a.none() = nb::none(),
          "cu_seqlens_k"_a.none() = nb::none(), "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0,
          "Bytes of workspace backward() needs for these arguments (256-byte aligned).")
      .def("compile", &PyKernel::compile, "device"_a = 0, "target"_a.none() = nb::none(),
           "backward"_a = false,
           "Runtime::compile now (Runtime::compile_backward too with backward=True) for "
           "`target`, else GPU `device`'s own; returns the compile reports as dicts.")
      .def("reports", &PyKernel::reports,
           "Kernel::reports of every GPU this kernel ran on: one dict per variant loaded.");
}

}  // namespace flashjit::py
