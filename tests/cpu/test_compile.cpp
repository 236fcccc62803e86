// NVRTC compilation: every shipped config for sm_80 and sm_90a without spills, compile errors
// that quote the generated source, and the caches (memory, disk, disabled) counted in NVRTC
// invocations rather than hoped for.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "flashjit/flashjit.h"
#include "runtime/nvrtc_compiler.h"
#include "tests/cpu/runtime_test_support.h"

using flashjit::CompileReport;
using flashjit::Error;
using flashjit::ErrorKind;
using flashjit::Runtime;
using flashjit::Spec;
using flashjit::rt::nvrtc_compile;
using flashjit::rt::nvrtc_invocations;
using flashjit::test::ScopedEnv;
using flashjit::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> config_paths() {
  std::vector<std::string> paths;
  for (const auto& item : fs::directory_iterator(FLASHJIT_SOURCE_DIR "/configs")) {
    if (item.path().extension() == ".yaml") paths.push_back(item.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

struct CompileJob {
  std::string config;
  std::string target;
  CompileReport report;
  std::string error;  // what() of an exception, if the compile threw
};

// Runs the jobs on every core: Runtime::compile is meant to be called from several threads
// (the autotuner does), so this also exercises that. Checks happen on the main thread.
void compile_all(Runtime& runtime, std::vector<CompileJob>& jobs) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  const unsigned count = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned t = 0; t < count; ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < jobs.size(); i = next++) {
        try {
          jobs[i].report = runtime.compile(Spec::from_file(jobs[i].config), jobs[i].target);
        } catch (const std::exception& e) {
          jobs[i].error = e.what();
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

const char* kTrivialKernel = R"(extern "C" __global__ void trivial(float* out) {
  out[threadIdx.x] = 2.0f * threadIdx.x;
}
)";

}  // namespace

TEST_CASE("nvrtc: a kernel compiles to a cubin and PTX for every target") {
  for (const char* target : {"sm_80", "sm_86", "sm_89", "sm_90a"}) {
    CAPTURE(target);
    const auto before = nvrtc_invocations();
    const auto out = nvrtc_compile(kTrivialKernel, "trivial.cu", target);
    CHECK(nvrtc_invocations() == before + 1);
    CHECK(out.cubin.size() > 0);
    CHECK(out.cubin.compare(0, 4, "\x7f" "ELF") == 0);
    CHECK(out.ptx.find(std::string(".target ") + target) != std::string::npos);
    CHECK(out.log.find("Used") != std::string::npos);  // the ptxas -v report is captured
    CHECK(out.compile_ms > 0);
  }
}

TEST_CASE("nvrtc: a compile error carries the log and the generated lines it points at") {
  const std::string source = std::string(kTrivialKernel) +
                             "__device__ int first_helper() { return 1; }\n"
                             "__device__ int broken() { return not_declared_anywhere; }\n"
                             "__device__ int last_helper() { return 3; }\n";
  try {
    nvrtc_compile(source, "broken.cu", "sm_80");
    FAIL("the broken source compiled");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Compile);
    const std::string message = e.what();
    CHECK(message.find("not_declared_anywhere") != std::string::npos);  // the log
    CHECK(message.find("broken.cu(5)") != std::string::npos);
    CHECK(message.find(">     5 | __device__ int broken()") != std::string::npos);
    CHECK(message.find("      4 | __device__ int first_helper()") != std::string::npos);
    CHECK(message.find("      6 | __device__ int last_helper()") != std::string::npos);
  }
}

// Every target DESIGN.md names: sm_86/sm_89 have 99 KB of shared memory, so the heuristic's
// fallback tiles are exercised there.
TEST_CASE("compile: every config builds for every target with no spills; repeats are hits") {
  TempDir cache_dir;
  ScopedEnv dir("FLASHJIT_CACHE_DIR", cache_dir.str());
  ScopedEnv enabled("FLASHJIT_DISABLE_CACHE", std::nullopt);
  const std::vector<std::string> configs = config_paths();
  REQUIRE_FALSE(configs.empty());

  std::vector<CompileJob> jobs;
  for (const std::string& config : configs) {
    for (const char* target : {"sm_80", "sm_86", "sm_89", "sm_90a"})
      jobs.push_back({config, target, {}, {}});
  }

  Runtime runtime;
  const auto before = nvrtc_invocations();
  compile_all(runtime, jobs);
  CHECK(nvrtc_invocations() - before == jobs.size());
  for (const CompileJob& job : jobs) {
    CAPTURE(job.config);
    CAPTURE(job.target);
    REQUIRE_MESSAGE(job.error.empty(), job.error);
    CHECK(job.report.target == job.target);
    CHECK_FALSE(job.report.cache_hit);
    CHECK(job.report.registers > 0);
    CHECK(job.report.spill_store_bytes == 0);
    CHECK(job.report.spill_load_bytes == 0);
    CHECK(job.report.stack_bytes == 0);
    CHECK(fs::exists(job.report.cache_file));
  }

  // Each block below runs once: doctest would rerun the whole case (and every compile) for
  // each SUBCASE.
  {  // the same runtime again: served from memory, NVRTC not invoked
    std::vector<CompileJob> again = jobs;
    const auto start = nvrtc_invocations();
    compile_all(runtime, again);
    CHECK(nvrtc_invocations() == start);
    for (const CompileJob& job : again) {
      REQUIRE_MESSAGE(job.error.empty(), job.error);
      CHECK(job.report.cache_hit);
      CHECK(job.report.compile_ms == 0);
    }
  }
  {  // a new runtime, as in a second process: loaded from disk, NVRTC not invoked
    Runtime fresh;
    std::vector<CompileJob> again = jobs;
    const auto start = nvrtc_invocations();
    compile_all(fresh, again);
    CHECK(nvrtc_invocations() == start);
    for (size_t i = 0; i < jobs.size(); ++i) {
      REQUIRE_MESSAGE(again[i].error.empty(), again[i].error);
      CHECK(again[i].report.cache_hit);
      CHECK(again[i].report.compile_ms == 0);
      // The report comes back from the stored ptxas log.
      CHECK(again[i].report.registers == jobs[i].report.registers);
      CHECK(again[i].report.kernel_name == jobs[i].report.kernel_name);
    }
  }
}

TEST_CASE("compile: FLASHJIT_DISABLE_CACHE compiles every time and writes nothing") {
  TempDir cache_dir;
  ScopedEnv dir("FLASHJIT_CACHE_DIR", cache_dir.str());
  ScopedEnv disabled("FLASHJIT_DISABLE_CACHE", "1");
  const Spec spec = Spec::from_file(config_paths().front());

  const auto before = nvrtc_invocations();
  const CompileReport report = Runtime().compile(spec, "sm_80");
  Runtime().compile(spec, "sm_80");
  CHECK(nvrtc_invocations() == before + 2);
  CHECK_FALSE(report.cache_hit);
  CHECK(report.cache_file.empty());
  CHECK(fs::is_empty(cache_dir.path()));
}

TEST_CASE("compile: FLASHJIT_DUMP_DIR receives the source, PTX and ptxas report, hit or miss") {
  TempDir cache_dir, dump_dir;
  ScopedEnv dir("FLASHJIT_CACHE_DIR", cache_dir.str());
  ScopedEnv enabled("FLASHJIT_DISABLE_CACHE", std::nullopt);
  ScopedEnv dump("FLASHJIT_DUMP_DIR", dump_dir.str());
  const Spec spec = Spec::from_file(config_paths().front());

  const CompileReport report = Runtime().compile(spec, "sm_90a");
  const fs::path base = dump_dir.path() / report.kernel_name;
  for (const char* suffix : {".cu", ".ptx", ".ptxas.txt"}) {
    CAPTURE(suffix);
    CHECK(fs::file_size(base.string() + suffix) > 0);
  }
  fs::remove_all(dump_dir.path());
  Runtime().compile(spec, "sm_90a");  // a disk hit dumps the stored artifacts too
  CHECK(fs::file_size(base.string() + ".ptx") > 0);
  CHECK(fs::file_size(base.string() + ".ptxas.txt") > 0);
}

TEST_CASE("compile: the alignment asked for is the kernel's, for every operation's kernels") {
  TempDir cache_dir;
  ScopedEnv dir("FLASHJIT_CACHE_DIR", cache_dir.str());
  const Spec spec = Spec::from_yaml("name: packed100\nhead_dim: 100\ndtype: bf16\n");
  Runtime runtime;
  // Packed tensors of head dim 100 have 200-byte rows: 8-byte aligned.
  CHECK(runtime.compile(spec, "sm_80", 8).kernel_name.find("_a8_") != std::string::npos);
  CHECK(runtime.compile(spec, "sm_80").kernel_name.find("_a16_") != std::string::npos);
  for (const CompileReport& r : runtime.compile_backward(spec, "sm_80", 2)) {
    CAPTURE(r.kernel_name);
    CHECK(r.kernel_name.find("_a2_") != std::string::npos);
  }
  const std::vector<CompileReport> decode = runtime.compile_decode(spec, "sm_80", 4);
  REQUIRE(decode.size() > 2);
  CHECK(decode.front().kernel_name.find("_a4_") != std::string::npos);
  CHECK_THROWS_AS(runtime.compile(spec, "sm_80", 3), Error);
}
