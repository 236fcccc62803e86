// Entry point of the GPU suite: without a GPU it says so loudly and exits 77 (ctest reports
// the test as skipped); with one it compiles every grid spec in parallel, then runs doctest.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "generator/plan.h"
#include "runtime/driver.h"
#include "tests/gpu/gpu_grid.h"
#include "tests/gpu/gpu_runtime.h"

namespace flashjit::gpu_test {

Runtime& gpu_runtime() {
  static Runtime runtime;
  return runtime;
}

namespace {

// NVRTC is thread-safe and the runtime's compiler shares one in-memory cache between
// Runtime::compile and the kernels it hands out, so compiling the 16-byte-aligned variant of
// every spec here, in parallel, leaves the tests only module loads. A failure is left for the
// test that uses the spec to report.
void precompile_grid() {
  const auto started = std::chrono::steady_clock::now();
  const DeviceInfo info = gpu_runtime().device();
  const std::string target = gen::target_for_device(info.cc_major, info.cc_minor);
  std::vector<Spec> specs = grid_specs();
  for (const auto& more : {window_specs(), block_sparse_specs(), pattern_specs()})
    specs.insert(specs.end(), more.begin(), more.end());
  std::atomic<size_t> next{0};
  std::atomic<int> failed{0};
  auto worker = [&] {
    for (size_t n = next++; n < specs.size(); n = next++) {
      try {
        gpu_runtime().compile(specs[n], target);
      } catch (const Error&) {
        ++failed;
      }
    }
  };
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  std::vector<std::jthread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  pool.clear();  // joins
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  fmt::print("compiled {} specs for {} on {} threads in {:.1f} s ({} failed)\n", specs.size(),
             target, threads, seconds, failed.load());
}

}  // namespace
}  // namespace flashjit::gpu_test

int main(int argc, char** argv) {
  using namespace flashjit;
  if (!rt::Driver::available()) {
    const std::string line = fmt::format(
        "SKIPPED: no GPU ({}) — the gpu suite did not run", rt::Driver::unavailable_reason());
    fmt::print(stdout, "{}\n", line);
    fmt::print(stderr, "{}\n", line);
    return 77;
  }
  const DeviceInfo info = gpu_test::gpu_runtime().device();
  fmt::print("GPU: {} (sm_{}{}, {} SMs, driver {})\n", info.name, info.cc_major, info.cc_minor,
             info.sm_count, info.driver_version);
  std::fflush(stdout);
  gpu_test::precompile_grid();
  doctest::Context context(argc, argv);
  return context.run();
}
