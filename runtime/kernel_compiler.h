// Plan -> compiled kernel, through an in-memory cache, then the registered bundles, then the
// disk cache, then NVRTC. Shared by Runtime::compile (no GPU needed) and every Kernel's
// variants. The in-memory cache and the bundles match a plan by its rendered source, which
// needs no NVRTC; the disk-cache key includes the NVRTC version, so it is computed (and NVRTC
// loaded) only when no bundle holds the kernel.
#pragma once

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "flashjit/flashjit.h"
#include "generator/plan.h"
#include "runtime/bundle.h"
#include "runtime/disk_cache.h"
#include "runtime/ptxas_report.h"

namespace flashjit::rt {

struct CompiledKernel {
  gen::Plan plan;
  std::string source;
  Artifact artifacts;    // cubin, ptx, ptxas log and what they were built from
  PtxasReport ptxas;
  CompileReport report;  // as it was when the kernel was first obtained in this process
  std::string bundle;    // the bundle it came from ("" when compiled or from the disk cache)
};

class KernelCompiler {
 public:
  explicit KernelCompiler(DiskCache disk,
                          const BundleRegistry& bundles = BundleRegistry::global());

  // RuntimeOptions::require_prebuilt: a kernel missing from the bundles is an error.
  void set_require_prebuilt(bool require) { require_prebuilt_ = require; }

  // The compiled kernel for `plan`. `memory_hit` (if given) says whether it came from this
  // process's cache. Throws Error(Compile) when NVRTC rejects the source, when NVRTC cannot be
  // loaded, or (require_prebuilt) when no bundle holds the kernel.
  std::shared_ptr<const CompiledKernel> compile(const gen::Plan& plan, bool* memory_hit = nullptr);

  const DiskCache& disk() const { return disk_; }

 private:
  std::shared_ptr<const CompiledKernel> build(const gen::Plan& plan, std::string source,
                                              const std::string& source_sha256) const;

  DiskCache disk_;
  const BundleRegistry& bundles_;
  std::atomic<bool> require_prebuilt_{false};
  // Guards `compiled_`, which threads share: the autotuner compiles candidates in parallel
  // and applications call forward() from several threads. The lock is held only to look up
  // or insert; the compile itself runs outside it, and a second thread asking for a key in
  // flight waits on that key's future instead of compiling it again.
  std::mutex mutex_;
  std::map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>> compiled_;
};

// The disk-cache key of a rendered source for a target (DESIGN.md: generator version, source,
// NVRTC version, compile options, target). Needs NVRTC for its version.
std::string disk_cache_key(const std::string& source, const std::string& target);

// Writes <kernel_name>.cu, .ptx, .ptxas.txt and .cubin into FLASHJIT_DUMP_DIR when it is set.
void dump_if_requested(const CompiledKernel& kernel);

}  // namespace flashjit::rt
