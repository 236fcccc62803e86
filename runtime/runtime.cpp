// flashjit::Runtime and the Kernel it hands out: plan -> compile (KernelCompiler) -> load ->
// launch through the dlopen'ed driver. Tiles come from the spec, else from the tune DB entry
// for this GPU, spec and shape bucket, else from the built-in heuristic.
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "autotune/candidates.h"
#include "autotune/tune_db.h"
#include "autotune/tune_key.h"
#include "flashjit/flashjit.h"
#include "generator/plan.h"
#include "runtime/driver.h"
#include "runtime/env.h"
#include "runtime/forward_params.h"
#include "runtime/kernel_compiler.h"
#include "runtime/tensor_maps.h"
#include "runtime/tile_counters.h"

namespace flashjit {
namespace {

// One loaded variant of a kernel: the plan for one global-memory alignment and one tiling.
struct LoadedVariant {
  std::shared_ptr<const rt::CompiledKernel> compiled;
  void* module = nullptr;    // CUmodule
  void* function = nullptr;  // CUfunction
};

// (alignment in bytes, block_m, block_n, warps, stages, varlen, TMA can load Q/K/V)
using VariantKey = std::tuple<int, int, int, int, int, bool, bool>;

class JitKernel final : public Kernel {
 public:
  JitKernel(Spec spec, std::string target, tune::GpuIdentity gpu, int sm_count,
            std::shared_ptr<rt::KernelCompiler> compiler)
      : spec_(std::move(spec)),
        target_(std::move(target)),
        gpu_(std::move(gpu)),
        sm_count_(sm_count),
        spec_hash_(tune::spec_hash(spec_)),
        compiler_(std::move(compiler)) {}

  ~JitKernel() override {
    for (auto& [key, variant] : variants_) {
      try {
        rt::Driver::get().unload_module(variant.module);
      } catch (const Error&) {
        // Unloading at exit can fail once the driver is shutting down; nothing to recover.
      }
    }
  }

  void forward(const ForwardArgs& args, void* stream) override {
    rt::check_forward_args(spec_, args);
    const LoadedVariant& variant = variant_for(gen::forward_alignment(args), tiles_for(args),
                                               args.cu_seqlens_q != nullptr, rt::tma_loadable(args));
    const gen::Plan& plan = variant.compiled->plan;
    FwdParams params = rt::make_fwd_params(plan, args);
    const gen::LaunchGeometry geometry = gen::launch_geometry(plan, args, sm_count_);
    // The sm80 kernel takes one FwdParams by value; the sm90 kernel also its tensor maps,
    // and its persistent grid draws tiles from this stream's counter.
    rt::ForwardTensorMaps maps;
    if (plan.path == gen::KernelPath::Sm90) {
      maps = rt::make_tensor_maps(plan, args);
      std::lock_guard<std::mutex> lock(mutex_);
      params.tile_counter = tile_counters_.for_stream(stream);
    }
    void* kernel_params[] = {&params, &maps.q, &maps.k, &maps.v};
    rt::Driver::get().launch(variant.function, geometry.grid_x, geometry.grid_y, geometry.grid_z,
                             geometry.block_x, geometry.shared_bytes, stream, kernel_params);
  }

  const Spec& spec() const override { return spec_; }

  std::vector<CompileReport> reports() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<CompileReport> out;
    for (const auto& [key, variant] : variants_) out.push_back(variant.compiled->report);
    return out;
  }

 private:
  // The tiles for this call's shape bucket, decided once per bucket: the spec's own tiles,
  // else the tune DB's entry for this GPU, spec and bucket, else the heuristic. A DB that
  // cannot be read or holds tiles that cannot run here is never an error for the caller:
  // the heuristic serves and FLASHJIT_VERBOSE says why.
  Tiles tiles_for(const ForwardArgs& args) {
    if (!spec_.tiles.is_auto()) return spec_.tiles;
    const tune::ShapeBucket bucket =
        tune::bucket_for(args.seqlen_q, args.seqlen_k, args.batch, args.heads_q);
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = tiles_by_bucket_.find(bucket); found != tiles_by_bucket_.end())
      return found->second;
    Tiles chosen = gen::default_tiles(spec_, target_);
    bool from_db = false;
    std::string why;
    try {
      const tune::Lookup found =
          tune::TuneDb(tune::default_db_path()).lookup(gpu_, spec_hash_, bucket);
      why = found.note;
      if (found.entry && found.entry->target != target_) {
        why += fmt::format("; tuned for {}, not {}: ignored", found.entry->target, target_);
      } else if (found.entry) {
        const std::string problem = gen::tiles_problem(spec_, target_, found.entry->tiles);
        from_db = problem.empty();
        if (from_db)
          chosen = found.entry->tiles;
        else
          why += fmt::format("; they cannot run here ({}): ignored", problem);
      }
    } catch (const Error& error) {
      why = fmt::format("tune DB unusable: {}", error.what());
    }
    rt::verbose("{} [{}]: {} tiles {} ({})", spec_.name, tune::describe(bucket),
                from_db ? "tuned" : "heuristic", tune::tiles_label(chosen), why);
    tiles_by_bucket_.emplace(bucket, chosen);
    return chosen;
  }

  // The first call for an (alignment, tiles) pair compiles and loads while holding the lock:
  // other threads launching this kernel need that same variant and would only wait anyway.
  const LoadedVariant& variant_for(int align_bytes, const Tiles& tiles, bool varlen, bool tma) {
    std::lock_guard<std::mutex> lock(mutex_);
    const VariantKey key{align_bytes, tiles.block_m, tiles.block_n, tiles.warps, tiles.stages,
                         varlen, tma};
    if (auto found = variants_.find(key); found != variants_.end()) return found->second;

    gen::Plan plan = gen::make_plan(spec_, target_, align_bytes, &tiles, tma);
    if (varlen) plan = gen::varlen_variant(std::move(plan));
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
      if (plan.path == gen::KernelPath::Sm90) tile_counters_.reserve();
    } catch (...) {
      driver.unload_module(variant.module);
      throw;
    }
    rt::verbose("{}: loaded variant for {}-byte aligned tensors on {}", plan.kernel_name,
                align_bytes, target_);
    return variants_.emplace(key, std::move(variant)).first->second;
  }

  const Spec spec_;
  const std::string target_;
  const tune::GpuIdentity gpu_;
  const int sm_count_;
  const std::string spec_hash_;
  std::shared_ptr<rt::KernelCompiler> compiler_;
  // Guards variants_, tiles_by_bucket_ and tile_counters_: forward() may run on several
  // threads.
  mutable std::mutex mutex_;
  std::map<VariantKey, LoadedVariant> variants_;
  std::map<tune::ShapeBucket, Tiles> tiles_by_bucket_;
  rt::TileCounters tile_counters_;
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
  impl_->compiler->set_require_prebuilt(options.require_prebuilt);
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
  return std::make_shared<JitKernel>(spec, target, tune::gpu_identity(info), info.sm_count,
                                     impl_->compiler);
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
