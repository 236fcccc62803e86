// The C ABI (flashjit_c.h): statuses and messages cross the boundary intact, null handles are
// refused, and a machine without a GPU gets FLASHJIT_ERROR_NO_DEVICE, not a crash.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashjit/flashjit.h"
#include "flashjit/flashjit_c.h"

namespace {

constexpr const char* kValidYaml = "name: capi_hd64\nhead_dim: 64\ndtype: bf16\ncausal: true\n";

std::string last_error() { return flashjit_last_error(); }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A runtime that the test case owns and destroys.
struct RuntimeHandle {
  flashjit_runtime* runtime = nullptr;
  RuntimeHandle() { REQUIRE(flashjit_runtime_create(&runtime) == FLASHJIT_OK); }
  ~RuntimeHandle() { flashjit_runtime_destroy(runtime); }
};

}  // namespace

TEST_CASE("capi: the version is the C++ library's") {
  CHECK(std::string(flashjit_version()) == flashjit::version());
}

TEST_CASE("capi: a bad spec gives FLASHJIT_ERROR_SPEC with the parser's message") {
  RuntimeHandle handle;
  // A stale value: a failing call must reset it to null.
  flashjit_kernel* kernel = reinterpret_cast<flashjit_kernel*>(std::uintptr_t{0x10});
  SUBCASE("unknown key") {
    CHECK(flashjit_kernel_from_yaml(handle.runtime, "name: x\nhead_dim: 64\ncasual: true\n",
                                    &kernel) == FLASHJIT_ERROR_SPEC);
    CHECK(last_error().rfind("<yaml_text>:3:1: casual: unknown key", 0) == 0);
  }
  SUBCASE("value out of range") {
    CHECK(flashjit_kernel_from_yaml(handle.runtime, "name: x\nhead_dim: 1000\n", &kernel) ==
          FLASHJIT_ERROR_SPEC);
    CHECK(contains(last_error(), "head_dim"));
  }
  SUBCASE("not YAML") {
    CHECK(flashjit_kernel_from_yaml(handle.runtime, "name: [x\n", &kernel) ==
          FLASHJIT_ERROR_SPEC);
    CHECK(contains(last_error(), "<yaml_text>"));
  }
  CHECK(kernel == nullptr);
}

TEST_CASE("capi: null handles and arguments are FLASHJIT_ERROR_USAGE naming the argument") {
  RuntimeHandle handle;
  flashjit_kernel* kernel = nullptr;
  const int64_t strides[3] = {1, 1, 1};

  CHECK(flashjit_runtime_create(nullptr) == FLASHJIT_ERROR_USAGE);
  CHECK(contains(last_error(), "flashjit_runtime_create: out is null"));

  CHECK(flashjit_kernel_from_yaml(nullptr, kValidYaml, &kernel) == FLASHJIT_ERROR_USAGE);
  CHECK(contains(last_error(), "runtime is null"));
  CHECK(flashjit_kernel_from_yaml(handle.runtime, nullptr, &kernel) == FLASHJIT_ERROR_USAGE);
  CHECK(contains(last_error(), "yaml_text is null"));
  CHECK(flashjit_kernel_from_yaml(handle.runtime, kValidYaml, nullptr) == FLASHJIT_ERROR_USAGE);
  CHECK(contains(last_error(), "out is null"));

  CHECK(flashjit_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 1, 1,
                         strides, strides, strides, strides, 0.f,
                         nullptr) == FLASHJIT_ERROR_USAGE);
  CHECK(contains(last_error(), "flashjit_forward: kernel is null"));

  CHECK(flashjit_kernel_report_json(nullptr) == nullptr);
  CHECK(contains(last_error(), "flashjit_kernel_report_json: kernel is null"));

  flashjit_runtime_destroy(nullptr);  // no-ops, as free(NULL)
  flashjit_kernel_destroy(nullptr);
}

TEST_CASE("capi: a valid spec without a GPU is FLASHJIT_ERROR_NO_DEVICE; with one, a kernel") {
  RuntimeHandle handle;
  flashjit_kernel* kernel = nullptr;
  const int status = flashjit_kernel_from_yaml(handle.runtime, kValidYaml, &kernel);
  if (!flashjit::Runtime().has_device()) {
    CHECK(status == FLASHJIT_ERROR_NO_DEVICE);
    CHECK(kernel == nullptr);
    CHECK(contains(last_error(), "capi_hd64"));
    return;
  }
  // On the GPU machine: the kernel exists, nothing is compiled before the first forward,
  // and a forward with null tensors is a Shape error raised before any compile or launch.
  REQUIRE(status == FLASHJIT_OK);
  REQUIRE(kernel != nullptr);
  const auto report = nlohmann::json::parse(flashjit_kernel_report_json(kernel));
  CHECK(report.at("spec") == "capi_hd64");
  CHECK(report.at("reports").empty());
  const int64_t strides[3] = {64 * 128, 64, 64};
  CHECK(flashjit_forward(kernel, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 128, 128,
                         strides, strides, strides, strides, 0.f,
                         nullptr) == FLASHJIT_ERROR_SHAPE);
  CHECK(contains(last_error(), "forward: "));
  flashjit_kernel_destroy(kernel);
}

TEST_CASE("capi: the last error is per thread") {
  RuntimeHandle handle;
  flashjit_kernel* kernel = nullptr;
  REQUIRE(flashjit_kernel_from_yaml(handle.runtime, "head_dim: 0\n", &kernel) ==
          FLASHJIT_ERROR_SPEC);
  const std::string mine = last_error();
  std::string theirs;
  std::thread([&] {
    theirs = last_error();  // nothing failed on this thread yet
    flashjit_kernel_from_yaml(nullptr, kValidYaml, &kernel);
  }).join();
  CHECK(theirs.empty());
  CHECK(last_error() == mine);
}

TEST_CASE("capi: the block layout of a dense matrix, rows k_blocks wide") {
  // [batch 1, heads 2, q_blocks 2, k_blocks 3]
  const uint8_t visible[] = {0, 1, 1,  0, 0, 0,  1, 0, 0,  1, 1, 1};
  int32_t counts[4] = {-1, -1, -1, -1};
  int32_t indices[12];
  std::fill(std::begin(indices), std::end(indices), -1);
  REQUIRE(flashjit_block_layout_from_dense(visible, 1, 2, 2, 3, counts, indices) == FLASHJIT_OK);
  CHECK(std::vector<int32_t>(counts, counts + 4) == std::vector<int32_t>{2, 0, 1, 3});
  CHECK(std::vector<int32_t>(indices, indices + 12) ==
        std::vector<int32_t>{1, 2, 0,  0, 0, 0,  0, 0, 0,  0, 1, 2});
  CHECK(flashjit_block_layout_from_dense(nullptr, 1, 2, 2, 3, counts, indices) ==
        FLASHJIT_ERROR_USAGE);
  CHECK(contains(last_error(), "flashjit_block_layout_from_dense: visible is null"));
  CHECK(flashjit_block_layout_from_dense(visible, 1, 0, 2, 3, counts, indices) ==
        FLASHJIT_ERROR_SHAPE);
}
