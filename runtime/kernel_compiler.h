// Plan -> compiled kernel, through an in-memory cache, then the disk cache, then NVRTC.
// Shared by Runtime::compile (no GPU needed) and every Kernel's variants.
#pragma once

#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "flashjit/flashjit.h"
#include "generator/plan.h"
#include "runtime/disk_cache.h"
#include "runtime/ptxas_report.h"

namespace flashjit::rt {

struct CompiledKernel {
  gen::Plan plan;
  std::string source;
  CacheEntry artifacts;  // cubin, ptx, ptxas log
  PtxasReport ptxas;
  CompileReport report;  // as it was when the kernel was first obtained in this process
};

class KernelCompiler {
 public:
  explicit KernelCompiler(DiskCache disk);

  // The compiled kernel for `plan`. `memory_hit` (if given) says whether it came from this
  // process's cache. Throws Error(Compile) when NVRTC rejects the source.
  std::shared_ptr<const CompiledKernel> compile(const gen::Plan& plan, bool* memory_hit = nullptr);

  const DiskCache& disk() const { return disk_; }

 private:
  std::shared_ptr<const CompiledKernel> build(const gen::Plan& plan, std::string source,
                                              const std::string& key) const;

  DiskCache disk_;
  // Guards `compiled_`, which threads share: the autotuner compiles candidates in parallel
  // and applications call forward() from several threads. The lock is held only to look up
  // or insert; the compile itself runs outside it, and a second thread asking for a key in
  // flight waits on that key's future instead of compiling it again.
  std::mutex mutex_;
  std::map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>> compiled_;
};

// Writes <kernel_name>.cu, .ptx and .ptxas.txt into FLASHJIT_DUMP_DIR when it is set.
void dump_if_requested(const CompiledKernel& kernel);

}  // namespace flashjit::rt
