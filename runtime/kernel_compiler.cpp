#include "runtime/kernel_compiler.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "generator/emit.h"
#include "runtime/env.h"
#include "runtime/nvrtc_compiler.h"

namespace flashjit::rt {
namespace {

CompileReport make_report(const gen::Plan& plan, const PtxasReport& ptxas) {
  CompileReport report;
  report.kernel_name = plan.kernel_name;
  report.target = plan.target;
  report.tiles = plan.tiles;
  report.registers = ptxas.registers;
  report.shared_bytes = plan.shared_bytes;
  report.spill_store_bytes = ptxas.spill_store_bytes;
  report.spill_load_bytes = ptxas.spill_load_bytes;
  report.stack_bytes = ptxas.stack_bytes;
  return report;
}

// What a cache entry records besides the compiler's output.
Artifact artifact_of(const gen::Plan& plan, const std::string& cache_key,
                     const std::string& source_sha256) {
  Artifact artifact;
  artifact.cache_key = cache_key;
  artifact.kernel_name = plan.kernel_name;
  artifact.target = plan.target;
  artifact.source_sha256 = source_sha256;
  artifact.spec_name = plan.spec.name;
  artifact.spec_yaml = plan.spec.to_yaml();
  artifact.align_bytes = plan.call.align_bytes;
  artifact.tiles = plan.tiles;
  return artifact;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw Error(ErrorKind::Io, fmt::format("cannot write {} (FLASHJIT_DUMP_DIR)", path.string()));
}

}  // namespace

KernelCompiler::KernelCompiler(DiskCache disk, const BundleRegistry& bundles)
    : disk_(std::move(disk)), bundles_(bundles) {}

std::shared_ptr<const CompiledKernel> KernelCompiler::compile(const gen::Plan& plan,
                                                              bool* memory_hit) {
  std::string source = gen::emit_source(plan);
  const std::string source_sha256 = sha256_hex(source);
  // In-memory key: the source's header names the generator version and the target, and the
  // rest of it is every constant of the plan; the target is prefixed for readable dumps.
  const std::string key = plan.target + ":" + source_sha256;

  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  std::shared_future<std::shared_ptr<const CompiledKernel>> future;
  bool owner = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [slot, inserted] = compiled_.try_emplace(key);
    if (inserted) slot->second = promise.get_future().share();
    future = slot->second;
    owner = inserted;
  }
  if (memory_hit) *memory_hit = !owner;
  if (!owner) return future.get();  // rethrows the owner's compile error, if any

  try {
    promise.set_value(build(plan, std::move(source), source_sha256));
  } catch (...) {
    promise.set_exception(std::current_exception());
    // Forget the failure so that a later call tries again (and reports the error itself).
    std::lock_guard<std::mutex> lock(mutex_);
    compiled_.erase(key);
  }
  return future.get();
}

std::shared_ptr<const CompiledKernel> KernelCompiler::build(
    const gen::Plan& plan, std::string source, const std::string& source_sha256) const {
  auto kernel = std::make_shared<CompiledKernel>();
  kernel->plan = plan;
  kernel->source = std::move(source);

  const BundleRegistry::Match match =
      bundles_.find(plan.target, plan.kernel_name, plan.spec.name, source_sha256);
  if (match.kernel) {
    kernel->artifacts = *match.kernel;
    kernel->ptxas = parse_ptxas_report(kernel->artifacts.ptxas_log, plan.kernel_name);
    kernel->report = make_report(plan, kernel->ptxas);
    kernel->report.cache_hit = true;
    kernel->bundle = match.bundle_name;
    verbose("{} ({}): from bundle {}", plan.kernel_name, plan.target, match.bundle_name);
    return kernel;
  }
  if (require_prebuilt_) {
    throw Error(ErrorKind::Compile,
                fmt::format("{} for {} is not in a registered bundle, and "
                            "RuntimeOptions::require_prebuilt forbids compiling it: {}",
                            plan.kernel_name, plan.target, match.why_not));
  }
  if (!bundles_.empty()) verbose("{} ({}): not bundled: {}", plan.kernel_name, plan.target,
                                 match.why_not);
  if (!nvrtc_available()) {
    throw Error(ErrorKind::Compile,
                fmt::format("{} for {} needs compiling, and {} (bundles: {}). Ship it in a "
                            "bundle (`flashjit build`) or install NVRTC",
                            plan.kernel_name, plan.target, nvrtc_unavailable_reason(),
                            match.why_not));
  }
  const std::string key = disk_cache_key(kernel->source, plan.target);
  std::optional<Artifact> entry = disk_.load(plan.kernel_name, key);
  if (entry) {
    try {
      kernel->ptxas = parse_ptxas_report(entry->ptxas_log, plan.kernel_name);
    } catch (const std::exception& error) {
      // A log this flashjit cannot parse (a number past int, say) makes the entry a miss that
      // the compile below rewrites, not an error on every run.
      verbose("cache entry for {}: ptxas log unusable ({}): treated as a miss", plan.kernel_name,
              error.what());
      entry.reset();
    }
  }
  if (entry) {
    kernel->artifacts = std::move(*entry);
    kernel->report = make_report(plan, kernel->ptxas);
    kernel->report.cache_hit = true;
    verbose("{} ({}): disk cache hit", plan.kernel_name, plan.target);
  } else {
    NvrtcOutput out = nvrtc_compile(kernel->source, plan.kernel_name + ".cu", plan.target);
    kernel->artifacts = artifact_of(plan, key, source_sha256);
    kernel->artifacts.cubin = std::move(out.cubin);
    kernel->artifacts.ptx = std::move(out.ptx);
    kernel->artifacts.ptxas_log = std::move(out.log);
    kernel->ptxas = parse_ptxas_report(kernel->artifacts.ptxas_log, plan.kernel_name);
    kernel->report = make_report(plan, kernel->ptxas);
    kernel->report.compile_ms = out.compile_ms;
    disk_.store(kernel->artifacts);
    verbose("{} ({}): compiled with NVRTC in {:.1f} ms: {} registers, {} bytes spilled",
            plan.kernel_name, plan.target, out.compile_ms, kernel->ptxas.registers,
            kernel->ptxas.spill_store_bytes);
  }
  for (const std::string& warning : kernel->ptxas.warnings) {
    verbose("{}: {}", plan.kernel_name, warning);
  }
  if (disk_.enabled()) kernel->report.cache_file = disk_.path_for(plan.kernel_name, key);
  return kernel;
}

std::string disk_cache_key(const std::string& source, const std::string& target) {
  return cache_key({version(), source, nvrtc_version(), nvrtc_options(target), target});
}

void dump_if_requested(const CompiledKernel& kernel) {
  const std::string dir = dump_dir();
  if (dir.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    throw Error(ErrorKind::Io,
                fmt::format("cannot create FLASHJIT_DUMP_DIR {}: {}", dir, error.message()));
  }
  const std::filesystem::path base = std::filesystem::path(dir) / kernel.plan.kernel_name;
  write_file(base.string() + ".cu", kernel.source);
  write_file(base.string() + ".ptx", kernel.artifacts.ptx);
  write_file(base.string() + ".ptxas.txt", kernel.artifacts.ptxas_log);
  write_file(base.string() + ".cubin", kernel.artifacts.cubin);  // for cuobjdump -sass
}

}  // namespace flashjit::rt
