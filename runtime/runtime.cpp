// flashjit::Runtime and the Kernel it hands out: an operation's plan (its launches) ->
// compile (KernelCompiler) -> load -> launch through the dlopen'ed driver. Tiles come from
// the spec (the forward's), else from the runtime's TileSource (the tune DB by default), else
// from the path's heuristic; decode's key splits from the call, else the tune DB, else a
// heuristic.
#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "flashjit/flashjit.h"
#include "generator/dec_sm80_path.h"
#include "generator/plan.h"
#include "generator/targets.h"
#include "runtime/backward_params.h"
#include "runtime/call_traits.h"
#include "runtime/decode_params.h"
#include "runtime/driver.h"
#include "runtime/env.h"
#include "runtime/forward_params.h"
#include "runtime/kernel_compiler.h"
#include "runtime/merge_params.h"
#include "runtime/operation.h"
#include "runtime/staging.h"
#include "runtime/tensor_maps.h"
#include "runtime/tile_counters.h"
#include "runtime/tune_db_splits.h"
#include "runtime/tune_db_tiles.h"
#include "runtime/tune_key.h"

namespace flashjit {
namespace {

// One loaded kernel: the compiled plan of one launch, its module and function.
struct LoadedVariant {
  std::shared_ptr<const rt::CompiledKernel> compiled;
  void* module = nullptr;    // CUmodule
  void* function = nullptr;  // CUfunction
};

// What an operation's plan depends on: the operation, the call's traits and the tiles (the
// backward's apart).
using OperationKey = std::tuple<gen::Operation, gen::CallTraits, Tiles, BackwardTiles>;

// An operation's plan with the loaded kernel of each launch, in the same order.
struct LoadedOperation {
  rt::OperationPlan plan;
  std::vector<const LoadedVariant*> kernels;
};

bool loads_through_tma(const rt::OperationPlan& plan) {
  return std::any_of(plan.launches.begin(), plan.launches.end(),
                     [](const gen::Plan& launch) { return launch.path->tma_loads; });
}

// The workspace `scratch` takes (null when it is empty): the caller's, checked for size and
// alignment, else stream-ordered memory that `owned` holds.
void* call_workspace(rt::Driver& driver, void* given, size_t given_bytes,
                     const std::vector<rt::ScratchBuffer>& scratch, rt::StreamScratch& owned,
                     void* stream, const char* call) {
  if (scratch.empty()) return nullptr;
  const size_t need = rt::workspace_bytes(scratch);
  if (given == nullptr) {
    owned = rt::StreamScratch(driver, need, stream);
    return owned.get();
  }
  if (given_bytes < need || reinterpret_cast<uintptr_t>(given) % 256 != 0)
    throw Error(ErrorKind::Shape,
                fmt::format("forward: workspace={} of {} bytes: this {} call needs {} bytes, "
                            "256-byte aligned (Kernel::forward_workspace_bytes)",
                            given, given_bytes, call, need));
  return given;
}

class JitKernel final : public Kernel {
 public:
  JitKernel(Spec spec, std::string target, int ordinal, DeviceInfo device,
            std::shared_ptr<const TileSource> tile_source,
            std::shared_ptr<rt::KernelCompiler> compiler)
      : spec_(std::move(spec)),
        target_(std::move(target)),
        dependent_launch_(gen::has_dependent_launch(target_)),
        ordinal_(ordinal),
        device_(std::move(device)),
        tile_source_(std::move(tile_source)),
        compiler_(std::move(compiler)) {}

  ~JitKernel() override {
    for (auto& [key, variant] : variants_) {
      try {
        rt::Driver::get(ordinal_).unload_module(variant.module);
      } catch (const Error&) {
        // Unloading at exit can fail once the driver is shutting down; nothing to recover.
      }
    }
  }

  void forward(const ForwardArgs& args, void* stream) override {
    rt::check_forward_args(spec_, args);
    if (rt::takes_decode(spec_, args)) {
      decode(args, stream);
      return;
    }
    const gen::CallTraits call = rt::forward_call_traits(spec_, args);
    const LoadedOperation& op =
        operation_for(gen::Operation::Forward, call, tiles_for(args, call));
    // Tensors TMA cannot load where they lie are copied first (runtime/staging.h).
    const rt::Staging staging = staging_for(op.plan, args);
    rt::Driver& driver = rt::Driver::get(ordinal_);
    const std::vector<rt::ScratchBuffer> scratch = staging.scratch();
    rt::StreamScratch owned;
    void* workspace = call_workspace(driver, args.workspace, args.workspace_bytes, scratch,
                                     owned, stream, "staged");
    const ForwardArgs loaded =
        rt::stage(driver, staging, rt::scratch_pointers(scratch, workspace), args, stream);
    if (staging.any()) say_staged(op.plan, scratch);
    for (size_t i = 0; i < op.kernels.size(); ++i)
      launch_forward_path(op.plan.launches[i], *op.kernels[i], args, loaded, stream);
  }

  void backward(const BackwardArgs& args, void* stream) override {
    rt::check_backward_args(spec_, args);
    const LoadedOperation& op = operation_for(gen::Operation::Backward,
                                              rt::backward_call_traits(spec_, args), Tiles{},
                                              backward_tiles_for(args.forward));
    rt::Driver& driver = rt::Driver::get(ordinal_);
    const rt::Staging staging = staging_for(op.plan, args);
    const std::vector<rt::ScratchBuffer> staged = staging.scratch();
    const std::vector<rt::ScratchBuffer> scratch = backward_scratch(op.plan, args, staged);
    const size_t first_staged = scratch.size() - staged.size();
    rt::check_backward_workspace(args, scratch);
    // Without a caller's workspace, stream-ordered memory: no synchronisation, and safe when
    // several streams run backwards at once.
    rt::StreamScratch owned;
    void* workspace = args.workspace;
    if (workspace == nullptr) {
      owned = rt::StreamScratch(driver, rt::workspace_bytes(scratch), stream);
      workspace = owned.get();
    }
    const std::vector<void*> buffers = rt::scratch_pointers(scratch, workspace);
    BwdParams params = rt::make_bwd_params(spec_, args, scratch, buffers);
    for (size_t i = 0; i < scratch.size(); ++i)
      if (scratch[i].zeroed)
        driver.zero_async(reinterpret_cast<rt::DevicePtr>(buffers[i]), scratch[i].bytes, stream);
    const BackwardArgs loaded =
        rt::stage(driver, staging, {buffers.begin() + first_staged, buffers.end()}, args, stream);
    if (staging.any()) say_staged(op.plan, staged);
    for (size_t i = 0; i < op.kernels.size(); ++i) {
      const gen::Plan& plan = op.plan.launches[i];
      const rt::LaunchGeometry g = rt::launch_geometry(plan, args.forward, device_.sm_count);
      // A TMA path takes the tensor maps of Q, K, V and dO (staged ones) after the parameters.
      rt::BackwardTensorMaps maps;
      if (plan.path->tma_loads) maps = rt::make_tensor_maps(driver, plan, loaded);
      void* kernel_params[] = {&params, &maps.q, &maps.k, &maps.v, &maps.d_o};
      driver.launch(op.kernels[i]->function, g.grid_x, g.grid_y, g.grid_z, g.block_x,
                    g.shared_bytes, stream, kernel_params);
    }
  }

  size_t forward_workspace_bytes(const ForwardArgs& args) const override {
    rt::check_forward_args(spec_, args);
    if (!rt::takes_decode(spec_, args)) {
      const gen::CallTraits call = rt::forward_call_traits(spec_, args);
      if (!gen::choose_path(gen::Step::Forward, spec_, target_, call).tma_loads) return 0;
      return rt::workspace_bytes(rt::forward_staging(spec_, args).scratch());
    }
    const rt::OperationPlan plan = decode_plan(args);
    const int splits = kv_splits_for(plan.launches[0], args).splits;
    return rt::workspace_bytes(rt::decode_scratch(spec_, args, splits));
  }

  // Sized by the plan backward() runs: the loaded one once a backward of these traits ran
  // (the query precedes every call that passes a workspace, so planning it anew each time
  // would sit on that path), else planned here without compiling.
  size_t backward_workspace_bytes(const BackwardArgs& args) const override {
    const gen::CallTraits call = rt::backward_call_traits(spec_, args);
    const BackwardTiles tiles = backward_tiles_for(args.forward);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto found = operations_.find({gen::Operation::Backward, call, Tiles{}, tiles});
      if (found != operations_.end()) {
        const rt::OperationPlan& plan = found->second.plan;
        return rt::workspace_bytes(backward_scratch(plan, args, staging_for(plan, args).scratch()));
      }
    }
    const rt::OperationPlan plan = rt::plan_backward(spec_, target_, call, &tiles);
    return rt::workspace_bytes(backward_scratch(plan, args, staging_for(plan, args).scratch()));
  }

  void merge(const MergeArgs& args, void* stream) override {
    rt::check_merge_args(spec_, args);
    const LoadedOperation& op = operation_for(gen::Operation::Merge, {}, Tiles{});
    const gen::Plan& plan = op.plan.launches[0];
    MergeParams params = rt::make_merge_params(args);
    void* kernel_params[] = {&params};
    const long long rows = 1LL * args.batch * args.heads * args.seqlen;
    rt::Driver::get(ordinal_).launch(
        op.kernels[0]->function,
        static_cast<unsigned>((rows + plan.tiles.block_m - 1) / plan.tiles.block_m), 1, 1,
        static_cast<unsigned>(plan.threads), 0, stream, kernel_params);
  }

  const Spec& spec() const override { return spec_; }

  std::vector<CompileReport> reports() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<CompileReport> out;
    for (const auto& [key, variant] : variants_) out.push_back(variant.compiled->report);
    return out;
  }

 private:
  // One launch of a forward path: its parameters, and for a persistent path this stream's
  // tile counter, for a TMA path the tensor maps of Q, K and V (`loaded`: the call with the
  // staged tensors in place of the caller's).
  void launch_forward_path(const gen::Plan& plan, const LoadedVariant& variant,
                           const ForwardArgs& args, const ForwardArgs& loaded, void* stream) {
    rt::Driver& driver = rt::Driver::get(ordinal_);
    FwdParams params = rt::make_fwd_params(plan, args);
    const rt::LaunchGeometry geometry = rt::launch_geometry(plan, args, device_.sm_count);
    rt::ForwardTensorMaps maps;
    if (plan.path->tma_loads) maps = rt::make_tensor_maps(driver, plan, loaded);
    if (plan.path->persistent_grid) {
      std::lock_guard<std::mutex> lock(mutex_);
      params.tile_counter = tile_counters_.for_stream(stream);
    }
    void* kernel_params[] = {&params, &maps.q, &maps.k, &maps.v};
    driver.launch(variant.function, geometry.grid_x, geometry.grid_y, geometry.grid_z,
                  geometry.block_x, geometry.shared_bytes, stream, kernel_params);
  }

  // The copies an operation's TMA launches need (runtime/staging.h); none without them.
  rt::Staging staging_for(const rt::OperationPlan& plan, const ForwardArgs& args) const {
    return loads_through_tma(plan) ? rt::forward_staging(spec_, args) : rt::Staging{};
  }
  rt::Staging staging_for(const rt::OperationPlan& plan, const BackwardArgs& args) const {
    return loads_through_tma(plan) ? rt::backward_staging(spec_, args) : rt::Staging{};
  }

  // FLASHJIT_VERBOSE: which tensors an operation copies for its TMA kernels, once a kernel
  // and set of tensors.
  void say_staged(const rt::OperationPlan& plan, const std::vector<rt::ScratchBuffer>& staged) {
    if (!rt::verbose_enabled()) return;
    std::string names;
    for (const rt::ScratchBuffer& buffer : staged)
      names += (names.empty() ? "" : ", ") + buffer.name.substr(buffer.name.find('_') + 1);
    const auto tma = std::find_if(plan.launches.begin(), plan.launches.end(),
                                  [](const gen::Plan& launch) { return launch.path->tma_loads; });
    const std::string line = fmt::format("{}: {} copied into padded rows for TMA "
                                         "(cuMemcpy3DAsync)", tma->kernel_name, names);
    std::lock_guard<std::mutex> lock(mutex_);
    if (said_.insert(line).second) rt::verbose_line(line);
  }

  // The backward's scratch: its launches' own, then the staged tensors' buffers.
  std::vector<rt::ScratchBuffer> backward_scratch(
      const rt::OperationPlan& plan, const BackwardArgs& args,
      const std::vector<rt::ScratchBuffer>& staged) const {
    std::vector<rt::ScratchBuffer> scratch = rt::backward_scratch(plan, args.forward);
    scratch.insert(scratch.end(), staged.begin(), staged.end());
    return scratch;
  }

  rt::OperationPlan decode_plan(const ForwardArgs& args) const {
    return rt::plan_decode(spec_, target_, rt::decode_call_traits(spec_, args),
                           decode_tiles(args));
  }

  // The split kernel's tiles for the call's packed rows, chosen once a row count: choosing
  // formats the reason of every tiling it passes over, too slow for a call every token.
  Tiles decode_tiles(const ForwardArgs& args) const {
    const int rows = rt::decode_packed_rows(args);
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = decode_tiles_.find(rows); found != decode_tiles_.end()) return found->second;
    return decode_tiles_.emplace(rows, gen::dec_sm80_tiles(spec_, target_, rows)).first->second;
  }

  // A decode call's key splits: the call's own, else the tune DB's for its decode bucket
  // (asked once a bucket), else the heuristic's. `note`, when given, gets what the DB said.
  rt::KvSplitChoice kv_splits_for(const gen::Plan& split_plan, const ForwardArgs& args,
                                  std::string* note = nullptr) const {
    const rt::KvSplitRange range = rt::decode_kv_split_range(split_plan, args, device_.sm_count);
    int tuned = 0;
    if (args.kv_splits == 0) {
      const tune::DecodeBucket bucket = tune::decode_bucket_for(
          rt::decode_packed_rows(args), args.seqlen_k, args.batch, args.heads_kv);
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = tuned_splits_.find(bucket);
      if (found == tuned_splits_.end())
        found = tuned_splits_.emplace(bucket, rt::tuned_kv_splits(spec_, device_, bucket)).first;
      tuned = found->second.splits;
      if (note) *note = found->second.note;
    }
    return rt::choose_kv_splits(range, args.kv_splits, tuned);
  }

  // A decode call: the split kernel over kv_splits splits of the keys, then, when there are
  // several, the combine of their partial outputs.
  void decode(const ForwardArgs& args, void* stream) {
    const Tiles tiles = decode_tiles(args);
    const LoadedOperation& op =
        operation_for(gen::Operation::Decode, rt::decode_call_traits(spec_, args), tiles);
    const gen::Plan& split_plan = op.plan.launches[0];
    std::string note;
    const rt::KvSplitChoice choice = kv_splits_for(split_plan, args, &note);
    const int splits = choice.splits;
    const std::vector<rt::ScratchBuffer> scratch = rt::decode_scratch(spec_, args, splits);
    rt::Driver& driver = rt::Driver::get(ordinal_);
    rt::StreamScratch owned;
    void* workspace = call_workspace(driver, args.workspace, args.workspace_bytes, scratch,
                                     owned, stream, "decode");
    if (rt::verbose_enabled()) {
      // Once a kernel and split count: a decode loop calls this every token.
      std::string why;
      rt::takes_decode(spec_, args, &why);
      const std::string line = fmt::format("{}: decode ({}), {}", split_plan.kernel_name, why,
                                           rt::describe(choice, note));
      std::lock_guard<std::mutex> lock(mutex_);
      if (said_.insert(line).second) rt::verbose_line(line);
    }
    DecParams params = rt::make_dec_params(spec_, args, splits, workspace);
    void* kernel_params[] = {&params};
    const size_t launches = splits > 1 ? op.kernels.size() : 1;
    for (size_t i = 0; i < launches; ++i) {
      const rt::LaunchGeometry g =
          rt::launch_geometry(op.plan.launches[i], args, device_.sm_count, splits);
      driver.launch(op.kernels[i]->function, g.grid_x, g.grid_y, g.grid_z, g.block_x,
                    g.shared_bytes, stream, kernel_params, dependent_launch_ && i > 0);
    }
  }

  // The tiles for this call's shape bucket and alignment, decided once each: the spec's own
  // tiles, else the tile source's, else the heuristic (which gives packed rows of a narrow
  // alignment smaller tiles where ptxas spilled). A source's tiles that cannot run here are
  // never an error for the caller: the heuristic serves and FLASHJIT_VERBOSE says why.
  Tiles tiles_for(const ForwardArgs& args, const gen::CallTraits& call) {
    if (!spec_.tiles.is_auto()) return spec_.tiles;
    const tune::ShapeBucket bucket =
        tune::bucket_for(args.seqlen_q, args.seqlen_k, args.batch, args.heads_q);
    const std::pair<tune::ShapeBucket, int> key{bucket, call.align_bytes};
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = tiles_by_bucket_.find(key); found != tiles_by_bucket_.end())
      return found->second;
    Tiles chosen = gen::default_tiles(spec_, target_, gen::Step::Forward, call);
    std::string why;
    const std::optional<Tiles> found = tile_source_->tiles(query_for(args), why);
    bool from_source = false;
    if (found) {
      const std::string problem = gen::tiles_problem(spec_, target_, *found);
      from_source = problem.empty();
      if (from_source)
        chosen = *found;
      else
        why += fmt::format("; they cannot run here ({}): ignored", problem);
    }
    rt::verbose("{} [{}]: {} tiles {} ({})", spec_.name, tune::describe(bucket),
                from_source ? "tuned" : "heuristic", gen::tiles_label(chosen), why);
    tiles_by_bucket_.emplace(key, chosen);
    return chosen;
  }

  // The backward's tiles for this call's shape bucket, decided once per bucket as the
  // forward's: the tile source's, else the heuristic's (auto). The spec's own tiles are the
  // forward's and play no part.
  BackwardTiles backward_tiles_for(const ForwardArgs& args) const {
    const tune::ShapeBucket bucket =
        tune::bucket_for(args.seqlen_q, args.seqlen_k, args.batch, args.heads_q);
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = backward_tiles_.find(bucket); found != backward_tiles_.end())
      return found->second;
    std::string why;
    std::optional<BackwardTiles> found = tile_source_->backward_tiles(query_for(args), why);
    if (found) {
      const std::string problem = rt::backward_tiles_problem(spec_, target_, *found);
      if (!problem.empty()) {
        why += fmt::format("; they cannot run here ({}): ignored", problem);
        found.reset();
      }
    }
    const BackwardTiles chosen = found.value_or(BackwardTiles{});
    rt::verbose("{} [{}]: backward {} ({})", spec_.name, tune::describe(bucket),
                found ? "tuned tiles " + rt::backward_tiles_label(chosen)
                      : std::string("heuristic tiles"),
                why);
    backward_tiles_.emplace(bucket, chosen);
    return chosen;
  }

  TileSource::Query query_for(const ForwardArgs& args) const {
    return {spec_, target_, device_, args.batch, args.heads_q, args.seqlen_q, args.seqlen_k};
  }

  // The plan of an operation for a call's traits and tiles, with its kernels loaded, made
  // once: a call after the first takes one lock and one lookup. The first compiles and loads
  // while holding the lock: other threads launching this kernel need the same kernels and
  // would only wait anyway.
  const LoadedOperation& operation_for(gen::Operation operation, const gen::CallTraits& call,
                                       const Tiles& tiles, const BackwardTiles& backward = {}) {
    std::lock_guard<std::mutex> lock(mutex_);
    const OperationKey key{operation, call, tiles, backward};
    if (auto found = operations_.find(key); found != operations_.end()) return found->second;
    LoadedOperation op;
    switch (operation) {
      case gen::Operation::Forward: op.plan = rt::plan_forward(spec_, target_, call, &tiles); break;
      case gen::Operation::Backward:
        op.plan = rt::plan_backward(spec_, target_, call, &backward);
        break;
      case gen::Operation::Decode: op.plan = rt::plan_decode(spec_, target_, call, tiles); break;
      case gen::Operation::Merge: op.plan = rt::plan_merge(spec_, target_); break;
    }
    for (const gen::Plan& plan : op.plan.launches) op.kernels.push_back(&load_locked(plan));
    return operations_.emplace(key, std::move(op)).first->second;
  }

  // The loaded kernel of `plan`, shared by every operation that launches it; the caller holds
  // mutex_.
  const LoadedVariant& load_locked(const gen::Plan& plan) {
    if (auto found = variants_.find(plan.kernel_name); found != variants_.end())
      return found->second;
    LoadedVariant variant;
    variant.compiled = compiler_->compile(plan);
    rt::dump_if_requested(*variant.compiled);
    rt::Driver& driver = rt::Driver::get(ordinal_);
    variant.module = driver.load_module(variant.compiled->artifacts.cubin);
    try {
      variant.function = driver.get_function(variant.module, plan.kernel_name);
      // Above 48 KB a kernel must opt in to its dynamic shared memory.
      if (plan.shared_bytes > 48 * 1024) {
        driver.set_max_dynamic_shared(variant.function, plan.shared_bytes);
      }
      if (plan.path->persistent_grid) tile_counters_.reserve();
    } catch (...) {
      driver.unload_module(variant.module);
      throw;
    }
    rt::verbose("{}: loaded for {}-byte aligned tensors on {}", plan.kernel_name,
                plan.call.align_bytes, target_);
    return variants_.emplace(plan.kernel_name, std::move(variant)).first->second;
  }

  const Spec spec_;
  const std::string target_;
  // On sm_90a decode's combine is launched while the split kernel ends (programmatic
  // dependent launch: it waits for the partial results on the device), which hides a launch's
  // latency in calls that last some 10 us.
  const bool dependent_launch_;
  const int ordinal_;  // the GPU this kernel is loaded and launched on
  const DeviceInfo device_;
  const std::shared_ptr<const TileSource> tile_source_;
  std::shared_ptr<rt::KernelCompiler> compiler_;
  // Guards operations_, variants_, tiles_by_bucket_, backward_tiles_, decode_tiles_,
  // tuned_splits_, said_ and tile_counters_: forward() may run on several threads.
  mutable std::mutex mutex_;
  std::map<OperationKey, LoadedOperation> operations_;
  std::map<std::string, LoadedVariant> variants_;  // by kernel name
  std::map<std::pair<tune::ShapeBucket, int>, Tiles> tiles_by_bucket_;  // by bucket, alignment
  mutable std::map<tune::ShapeBucket, BackwardTiles> backward_tiles_;
  mutable std::map<int, Tiles> decode_tiles_;  // by packed rows
  mutable std::map<tune::DecodeBucket, rt::TunedKvSplits> tuned_splits_;
  std::set<std::string> said_;  // FLASHJIT_VERBOSE's decode and staging lines, each said once
  rt::TileCounters tile_counters_{ordinal_};
};

}  // namespace

std::optional<BackwardTiles> TileSource::backward_tiles(const Query&, std::string& why) const {
  why = "the runtime's tile source gives no backward tiles";
  return std::nullopt;
}

struct Runtime::Impl {
  RuntimeOptions options;
  // Shared with the kernels handed out, which may outlive the Runtime.
  std::shared_ptr<rt::KernelCompiler> compiler =
      std::make_shared<rt::KernelCompiler>(rt::DiskCache::from_env());

  std::shared_ptr<const TileSource> tile_source() const {
    if (options.tile_source) return options.tile_source;
    static const auto tune_db = std::make_shared<const rt::TuneDbTiles>();
    return tune_db;
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->compiler->set_require_prebuilt(options.require_prebuilt);
}

Runtime::~Runtime() = default;

bool Runtime::has_device() const {
  return impl_->options.device >= 0 && impl_->options.device < rt::Driver::gpu_count();
}

DeviceInfo Runtime::device() const {
  return rt::Driver::get(impl_->options.device).device_info(impl_->options.device);
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
  return std::make_shared<JitKernel>(spec, target, impl_->options.device, info,
                                     impl_->tile_source(), impl_->compiler);
}

namespace {

CompileReport compile_plan(rt::KernelCompiler& compiler, const gen::Plan& plan) {
  bool memory_hit = false;
  const auto compiled = compiler.compile(plan, &memory_hit);
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

}  // namespace

CompileReport Runtime::compile(const Spec& spec, const std::string& target, int align_bytes) {
  spec.validate();
  return compile_plan(*impl_->compiler,
                      gen::make_plan(spec, target, {.align_bytes = align_bytes}));
}

std::vector<CompileReport> Runtime::compile_backward(const Spec& spec, const std::string& target,
                                                     int align_bytes) {
  spec.validate();
  std::vector<CompileReport> reports;
  const gen::CallTraits call{.align_bytes = align_bytes};
  for (const gen::Plan& plan : rt::plan_backward(spec, target, call).launches)
    reports.push_back(compile_plan(*impl_->compiler, plan));
  return reports;
}

std::vector<CompileReport> Runtime::compile_decode(const Spec& spec, const std::string& target,
                                                   int align_bytes) {
  spec.validate();
  std::vector<gen::Plan> plans;
  const bool decode_serves = gen::decode_serves_mask(spec);
  for (bool paged : {false, true}) {
    if (!decode_serves) break;
    const gen::CallTraits call{.align_bytes = align_bytes, .tma_loadable = false, .paged = paged};
    for (int rows = 8; rows <= rt::kDecodeMaxPackedRows; rows += rows == 8 ? 8 : 16) {
      const gen::Plan plan = rt::plan_decode(spec, target, call,
                                             gen::dec_sm80_tiles(spec, target, rows)).launches[0];
      const bool seen = std::any_of(plans.begin(), plans.end(), [&](const gen::Plan& p) {
        return p.kernel_name == plan.kernel_name;
      });
      if (!seen) plans.push_back(plan);
    }
  }
  if (decode_serves)
    plans.push_back(rt::plan_decode(spec, target,
                                    {.align_bytes = align_bytes, .tma_loadable = false},
                                    gen::dec_sm80_tiles(spec, target, 16)).launches[1]);
  plans.push_back(rt::plan_merge(spec, target).launches[0]);
  std::vector<CompileReport> reports;
  for (const gen::Plan& plan : plans) reports.push_back(compile_plan(*impl_->compiler, plan));
  return reports;
}

}  // namespace flashjit
