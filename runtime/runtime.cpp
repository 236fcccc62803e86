// flashjit::Runtime and the Kernel it hands out: plan -> compile (KernelCompiler) -> load ->
// launch through the dlopen'ed driver.
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "flashjit/flashjit.h"
#include "generator/plan.h"
#include "runtime/driver.h"
#include "runtime/env.h"
#include "runtime/forward_params.h"
#include "runtime/kernel_compiler.h"

namespace flashjit {
namespace {

// One loaded variant of a kernel: the plan for one global-memory alignment.
struct LoadedVariant {
  std::shared_ptr<const rt::CompiledKernel> compiled;
  void* module = nullptr;    // CUmodule
  void* function = nullptr;  // CUfunction
};

class JitKernel final : public Kernel {
 public:
  JitKernel(Spec spec, std::string target, std::shared_ptr<rt::KernelCompiler> compiler)
      : spec_(std::move(spec)), target_(std::move(target)), compiler_(std::move(compiler)) {}

  ~JitKernel() override {
    for (auto& [align, variant] : variants_) {
      try {
        rt::Driver::get().unload_module(variant.module);
      } catch (const Error&) {
        // Unloading at exit can fail once the driver is shutting down; nothing to recover.
      }
    }
  }

  void forward(const ForwardArgs& args, void* stream) override {
    rt::check_forward_args(spec_, args);
    const LoadedVariant& variant = variant_for(gen::forward_alignment(spec_, args));
    const gen::Plan& plan = variant.compiled->plan;
    FwdParams params = rt::make_fwd_params(plan, args);
    const gen::LaunchGeometry geometry = gen::launch_geometry(plan, args);
    void* kernel_params[] = {&params};  // the kernel takes one FwdParams by value
    rt::Driver::get().launch(variant.function, geometry.grid_x, geometry.grid_y, geometry.grid_z,
                             geometry.block_x, geometry.shared_bytes, stream, kernel_params);
  }

  const Spec& spec() const override { return spec_; }

  std::vector<CompileReport> reports() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<CompileReport> out;
    for (const auto& [align, variant] : variants_) out.push_back(variant.compiled->report);
    return out;
  }

 private:
  // The first call for an alignment compiles and loads while holding the lock: other threads
  // launching this kernel need that same variant and would only wait anyway.
  const LoadedVariant& variant_for(int align_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = variants_.find(align_bytes); found != variants_.end()) return found->second;

    const gen::Plan plan = gen::make_plan(spec_, target_, align_bytes);
    LoadedVariant variant;
    variant.compiled = compiler_->compile(plan);
    rt::dump_if_requested(*variant.compiled);
    rt::Driver& driver = rt::Driver::get();
    variant.module = driver.load_module(variant.compiled->artifacts.cubin);
    try {
      variant.function = driver.get_function(variant.module, plan.kernel_name);
      // Above 48 KB a kernel must opt in to its dynamic shared memory.
      if (plan.shared_bytes > 48 * 1024) {
        driver.set_max_dynamic_shared(variant.function, plan.shared_bytes);
      }
    } catch (...) {
      driver.unload_module(variant.module);
      throw;
    }
    rt::verbose("{}: loaded variant for {}-byte aligned tensors on {}", plan.kernel_name,
                align_bytes, target_);
    return variants_.emplace(align_bytes, std::move(variant)).first->second;
  }

  const Spec spec_;
  const std::string target_;
  std::shared_ptr<rt::KernelCompiler> compiler_;
  mutable std::mutex mutex_;  // guards variants_: forward() may run on several threads
  std::map<int, LoadedVariant> variants_;
};

}  // namespace

struct Runtime::Impl {
  RuntimeOptions options;
  // Shared with the kernels handed out, which may outlive the Runtime.
  std::shared_ptr<rt::KernelCompiler> compiler =
      std::make_shared<rt::KernelCompiler>(rt::DiskCache::from_env());

  // The driver serves device 0 only (its primary context); say so rather than use another.
  void require_supported_device() const {
    if (options.device != 0) {
      throw Error(ErrorKind::Usage,
                  fmt::format("RuntimeOptions.device = {}: only device 0 is supported",
                              options.device));
    }
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
}

Runtime::~Runtime() = default;

bool Runtime::has_device() const { return rt::Driver::available(); }

DeviceInfo Runtime::device() const {
  impl_->require_supported_device();
  return rt::Driver::get().device_info();
}

std::shared_ptr<Kernel> Runtime::kernel(const Spec& spec) {
  spec.validate();
  if (!rt::Driver::available()) {
    throw Error(ErrorKind::NoDevice,
                fmt::format("Runtime::kernel({}): {}. Compiling needs no GPU: use "
                            "Runtime::compile(spec, \"sm_90a\") or `flashjit compile`",
                            spec.name, rt::Driver::unavailable_reason()));
  }
  const DeviceInfo info = device();
  const std::string target = gen::target_for_device(info.cc_major, info.cc_minor);
  rt::verbose("kernel {} for {} ({}): compiled on first use", spec.name, info.name, target);
  return std::make_shared<JitKernel>(spec, target, impl_->compiler);
}

CompileReport Runtime::compile(const Spec& spec, const std::string& target) {
  spec.validate();
  const gen::Plan plan = gen::make_plan(spec, target, 16);
  bool memory_hit = false;
  const auto compiled = impl_->compiler->compile(plan, &memory_hit);
  rt::dump_if_requested(*compiled);
  CompileReport report = compiled->report;
  if (memory_hit) {
    // Served from this process's cache: no NVRTC ran for this call.
    report.cache_hit = true;
    report.compile_ms = 0;
    rt::verbose("{} ({}): in-memory cache hit", plan.kernel_name, plan.target);
  }
  return report;
}

}  // namespace flashjit
