// The C ABI of flashjit_c.h: handles wrap the C++ objects, exceptions become status codes
// and a thread-local message. No logic of its own beyond that translation.
#include "flashjit/flashjit_c.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capi/c_call_args.h"
#include "flashjit/flashjit.h"
#include "runtime/compile_report_json.h"

struct flashjit_runtime {
  flashjit::Runtime runtime;
};

struct flashjit_kernel {
  std::shared_ptr<flashjit::Kernel> kernel;
  std::string report_json;  // backs the pointer flashjit_kernel_report_json returns
};

namespace {

using flashjit::ErrorKind;
using flashjit::capi::null_argument;

// The status values are ErrorKind + 1: keep the header's enum in step with ErrorKind.
constexpr int status_of(ErrorKind kind) { return static_cast<int>(kind) + 1; }
static_assert(status_of(ErrorKind::Spec) == FLASHJIT_ERROR_SPEC);
static_assert(status_of(ErrorKind::Shape) == FLASHJIT_ERROR_SHAPE);
static_assert(status_of(ErrorKind::Compile) == FLASHJIT_ERROR_COMPILE);
static_assert(status_of(ErrorKind::Driver) == FLASHJIT_ERROR_DRIVER);
static_assert(status_of(ErrorKind::NoDevice) == FLASHJIT_ERROR_NO_DEVICE);
static_assert(status_of(ErrorKind::Cache) == FLASHJIT_ERROR_CACHE);
static_assert(status_of(ErrorKind::Io) == FLASHJIT_ERROR_IO);
static_assert(status_of(ErrorKind::Usage) == FLASHJIT_ERROR_USAGE);

thread_local std::string last_error;

int fail(int status, std::string message) {
  last_error = std::move(message);
  return status;
}

// Runs `body`, turning any exception into a status and the thread's last error: exceptions
// must not cross the C boundary.
template <typename Body>
int guarded(const char* function, Body&& body) {
  try {
    body();
    return FLASHJIT_OK;
  } catch (const flashjit::Error& e) {
    return fail(status_of(e.kind()), e.what());
  } catch (const std::exception& e) {
    return fail(FLASHJIT_ERROR_INTERNAL, std::string(function) + ": " + e.what());
  } catch (...) {
    return fail(FLASHJIT_ERROR_INTERNAL, std::string(function) + ": unknown exception");
  }
}

}  // namespace

extern "C" {

const char* flashjit_last_error(void) { return last_error.c_str(); }

const char* flashjit_version(void) { return flashjit::version(); }

int flashjit_runtime_create(flashjit_runtime** out) {
  return guarded("flashjit_runtime_create", [&] {
    if (out == nullptr) throw null_argument("flashjit_runtime_create", "out");
    *out = new flashjit_runtime{};
  });
}

int flashjit_runtime_create_on_device(int device, flashjit_runtime** out) {
  return guarded("flashjit_runtime_create_on_device", [&] {
    if (out == nullptr) throw null_argument("flashjit_runtime_create_on_device", "out");
    flashjit::RuntimeOptions options;
    options.device = device;
    *out = new flashjit_runtime{flashjit::Runtime(options)};
  });
}

void flashjit_runtime_destroy(flashjit_runtime* runtime) { delete runtime; }

int flashjit_kernel_from_yaml(flashjit_runtime* runtime, const char* yaml_text,
                              flashjit_kernel** out) {
  constexpr const char* function = "flashjit_kernel_from_yaml";
  return guarded(function, [&] {
    if (runtime == nullptr) throw null_argument(function, "runtime");
    if (yaml_text == nullptr) throw null_argument(function, "yaml_text");
    if (out == nullptr) throw null_argument(function, "out");
    *out = nullptr;
    const flashjit::Spec spec = flashjit::Spec::from_yaml(yaml_text, "<yaml_text>");
    *out = new flashjit_kernel{runtime->runtime.kernel(spec), {}};
  });
}

void flashjit_kernel_destroy(flashjit_kernel* kernel) { delete kernel; }

int flashjit_forward(flashjit_kernel* kernel, const void* q, const void* k, const void* v,
                     void* o, float* lse, int batch, int heads_q, int heads_kv, int seqlen_q,
                     int seqlen_k, const int64_t q_strides[3], const int64_t k_strides[3],
                     const int64_t v_strides[3], const int64_t o_strides[3],
                     float softmax_scale, void* stream) {
  return flashjit_forward_masked(kernel, q, k, v, o, lse, batch, heads_q, heads_kv, seqlen_q,
                                 seqlen_k, q_strides, k_strides, v_strides, o_strides,
                                 softmax_scale, nullptr, stream);
}

int flashjit_forward_masked(flashjit_kernel* kernel, const void* q, const void* k, const void* v,
                            void* o, float* lse, int batch, int heads_q, int heads_kv,
                            int seqlen_q, int seqlen_k, const int64_t q_strides[3],
                            const int64_t k_strides[3], const int64_t v_strides[3],
                            const int64_t o_strides[3], float softmax_scale,
                            const flashjit_mask_args* mask, void* stream) {
  constexpr const char* function = "flashjit_forward";
  return guarded(function, [&] {
    if (kernel == nullptr) throw null_argument(function, "kernel");
    const int64_t* const strides[] = {q_strides, k_strides, v_strides, o_strides};
    const flashjit::ForwardArgs args = flashjit::capi::forward_args(
        function, {q, k, v, o, lse}, {batch, heads_q, heads_kv, seqlen_q, seqlen_k}, strides,
        softmax_scale, mask);
    kernel->kernel->forward(args, stream);  // checks pointers and shapes itself
  });
}

namespace {

flashjit::ForwardArgs kv_cache_forward_args(const char* function, const void* q, const void* k,
                                            const void* v, void* o, float* lse, int batch,
                                            int heads_q, int heads_kv, int seqlen_q,
                                            int seqlen_k, const int64_t* const strides[4],
                                            float softmax_scale,
                                            const flashjit_kv_cache_args* cache) {
  flashjit::ForwardArgs args = flashjit::capi::forward_args(
      function, {q, k, v, o, lse}, {batch, heads_q, heads_kv, seqlen_q, seqlen_k}, strides,
      softmax_scale, nullptr);
  if (cache != nullptr) flashjit::capi::set_kv_cache(args, *cache);
  return args;
}

}  // namespace

int flashjit_forward_kv_cache(flashjit_kernel* kernel, const void* q, const void* k,
                              const void* v, void* o, float* lse, int batch, int heads_q,
                              int heads_kv, int seqlen_q, int seqlen_k,
                              const int64_t q_strides[3], const int64_t k_strides[3],
                              const int64_t v_strides[3], const int64_t o_strides[3],
                              float softmax_scale, const flashjit_kv_cache_args* cache,
                              void* workspace, size_t workspace_bytes, void* stream) {
  constexpr const char* function = "flashjit_forward_kv_cache";
  return guarded(function, [&] {
    if (kernel == nullptr) throw null_argument(function, "kernel");
    const int64_t* const strides[] = {q_strides, k_strides, v_strides, o_strides};
    flashjit::ForwardArgs args =
        kv_cache_forward_args(function, q, k, v, o, lse, batch, heads_q, heads_kv, seqlen_q,
                              seqlen_k, strides, softmax_scale, cache);
    args.workspace = workspace;
    args.workspace_bytes = workspace_bytes;
    kernel->kernel->forward(args, stream);
  });
}

int flashjit_forward_workspace_bytes(flashjit_kernel* kernel, const void* q, const void* k,
                                     const void* v, void* o, float* lse, int batch, int heads_q,
                                     int heads_kv, int seqlen_q, int seqlen_k,
                                     const int64_t q_strides[3], const int64_t k_strides[3],
                                     const int64_t v_strides[3], const int64_t o_strides[3],
                                     float softmax_scale, const flashjit_kv_cache_args* cache,
                                     size_t* out) {
  constexpr const char* function = "flashjit_forward_workspace_bytes";
  return guarded(function, [&] {
    if (kernel == nullptr) throw null_argument(function, "kernel");
    if (out == nullptr) throw null_argument(function, "out");
    const int64_t* const strides[] = {q_strides, k_strides, v_strides, o_strides};
    *out = kernel->kernel->forward_workspace_bytes(
        kv_cache_forward_args(function, q, k, v, o, lse, batch, heads_q, heads_kv, seqlen_q,
                              seqlen_k, strides, softmax_scale, cache));
  });
}

int flashjit_merge(flashjit_kernel* kernel, const void* o_a, const float* lse_a,
                   const void* o_b, const float* lse_b, void* o, float* lse, int batch,
                   int heads, int seqlen, const int64_t o_a_strides[3],
                   const int64_t o_b_strides[3], const int64_t o_strides[3], void* stream) {
  constexpr const char* function = "flashjit_merge";
  return guarded(function, [&] {
    if (kernel == nullptr) throw null_argument(function, "kernel");
    flashjit::MergeArgs args;
    args.o_a = o_a;
    args.lse_a = lse_a;
    args.o_b = o_b;
    args.lse_b = lse_b;
    args.o = o;
    args.lse = lse;
    args.batch = batch;
    args.heads = heads;
    args.seqlen = seqlen;
    args.o_a_stride = flashjit::capi::strides_of(o_a_strides, function, "o_a_strides");
    args.o_b_stride = flashjit::capi::strides_of(o_b_strides, function, "o_b_strides");
    args.o_stride = flashjit::capi::strides_of(o_strides, function, "o_strides");
    kernel->kernel->merge(args, stream);
  });
}

int flashjit_backward(flashjit_kernel* kernel, const void* q, const void* k, const void* v,
                      const void* o, const float* lse, const void* d_o, void* d_q, void* d_k,
                      void* d_v, int batch, int heads_q, int heads_kv, int seqlen_q,
                      int seqlen_k, const int64_t q_strides[3], const int64_t k_strides[3],
                      const int64_t v_strides[3], const int64_t o_strides[3],
                      const int64_t d_o_strides[3], const int64_t d_q_strides[3],
                      const int64_t d_k_strides[3], const int64_t d_v_strides[3],
                      float softmax_scale, const flashjit_mask_args* mask, void* workspace,
                      size_t workspace_bytes, void* stream) {
  constexpr const char* function = "flashjit_backward";
  return guarded(function, [&] {
    if (kernel == nullptr) throw null_argument(function, "kernel");
    const int64_t* const strides[] = {q_strides,   k_strides,   v_strides,   o_strides,
                                      d_o_strides, d_q_strides, d_k_strides, d_v_strides};
    const flashjit::BackwardArgs args = flashjit::capi::backward_args(
        function, {q, k, v, o, lse, d_o, d_q, d_k, d_v},
        {batch, heads_q, heads_kv, seqlen_q, seqlen_k}, strides, softmax_scale, mask, workspace,
        workspace_bytes);
    kernel->kernel->backward(args, stream);  // checks pointers and shapes itself
  });
}

int flashjit_backward_workspace_bytes(
    flashjit_kernel* kernel, const void* q, const void* k, const void* v, const void* o,
    const float* lse, const void* d_o, void* d_q, void* d_k, void* d_v, int batch, int heads_q,
    int heads_kv, int seqlen_q, int seqlen_k, const int64_t q_strides[3],
    const int64_t k_strides[3], const int64_t v_strides[3], const int64_t o_strides[3],
    const int64_t d_o_strides[3], const int64_t d_q_strides[3], const int64_t d_k_strides[3],
    const int64_t d_v_strides[3], float softmax_scale, const flashjit_mask_args* mask,
    size_t* out) {
  constexpr const char* function = "flashjit_backward_workspace_bytes";
  return guarded(function, [&] {
    if (kernel == nullptr) throw null_argument(function, "kernel");
    if (out == nullptr) throw null_argument(function, "out");
    *out = 0;
    const int64_t* const strides[] = {q_strides,   k_strides,   v_strides,   o_strides,
                                      d_o_strides, d_q_strides, d_k_strides, d_v_strides};
    const flashjit::BackwardArgs args = flashjit::capi::backward_args(
        function, {q, k, v, o, lse, d_o, d_q, d_k, d_v},
        {batch, heads_q, heads_kv, seqlen_q, seqlen_k}, strides, softmax_scale, mask, nullptr, 0);
    *out = kernel->kernel->backward_workspace_bytes(args);
  });
}

int flashjit_block_layout_from_dense(const uint8_t* visible, int batch, int heads, int q_blocks,
                                     int k_blocks, int32_t* counts, int32_t* indices) {
  constexpr const char* function = "flashjit_block_layout_from_dense";
  return guarded(function, [&] {
    if (visible == nullptr) throw null_argument(function, "visible");
    if (counts == nullptr) throw null_argument(function, "counts");
    if (indices == nullptr) throw null_argument(function, "indices");
    if (batch < 1 || heads < 1 || q_blocks < 1 || k_blocks < 1)
      throw flashjit::Error(ErrorKind::Shape,
                            std::string(function) + ": batch, heads, q_blocks and k_blocks must "
                                                    "be >= 1");
    const size_t rows = static_cast<size_t>(batch) * heads * q_blocks;
    const flashjit::BlockLayout layout = flashjit::block_layout_from_dense(
        std::vector<uint8_t>(visible, visible + rows * k_blocks), batch, heads, q_blocks,
        k_blocks);
    // Rows of the C form are k_blocks wide (the most any row can list).
    std::copy(layout.counts.begin(), layout.counts.end(), counts);
    std::fill(indices, indices + rows * k_blocks, 0);
    for (size_t r = 0; r < rows; ++r)
      std::copy_n(layout.indices.begin() + static_cast<std::ptrdiff_t>(r * layout.max_blocks),
                  layout.counts[r], indices + r * k_blocks);
  });
}

const char* flashjit_kernel_report_json(flashjit_kernel* kernel) {
  constexpr const char* function = "flashjit_kernel_report_json";
  const int status = guarded(function, [&] {
    if (kernel == nullptr) throw null_argument(function, "kernel");
    nlohmann::json reports = nlohmann::json::array();
    for (const flashjit::CompileReport& report : kernel->kernel->reports()) {
      reports.push_back(flashjit::rt::compile_report_json(report));
    }
    kernel->report_json =
        nlohmann::json{{"spec", kernel->kernel->spec().name}, {"reports", reports}}.dump();
  });
  return status == FLASHJIT_OK ? kernel->report_json.c_str() : nullptr;
}

}  // extern "C"
