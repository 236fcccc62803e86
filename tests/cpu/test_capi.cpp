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

#include "capi/c_call_args.h"
#include "flashjit/flashjit.h"
#include "flashjit/flashjit_c.h"

namespace {

constexpr const char* kValidYaml = "name: capi_hd64\nhead_dim: 64\ndtype: bf16\ncausal: true\n";

std::string last_error() { return flashjit_last_error(); }

// Distinct fake device addresses: the argument mapping only copies them.
template <typename T = void>
T* fake_pointer(std::uintptr_t n) {
  return reinterpret_cast<T*>(n * 0x1000);
}

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

  CHECK(flashjit_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                          nullptr, nullptr, 1, 1, 1, 1, 1, strides, strides, strides, strides,
                          strides, strides, strides, strides, 0.f, nullptr, nullptr, 0,
                          nullptr) == FLASHJIT_ERROR_USAGE);
  CHECK(contains(last_error(), "flashjit_backward: kernel is null"));
  size_t bytes = 123;
  CHECK(flashjit_backward_workspace_bytes(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                          nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 1, 1,
                                          strides, strides, strides, strides, strides, strides,
                                          strides, strides, 0.f, nullptr,
                                          &bytes) == FLASHJIT_ERROR_USAGE);
  CHECK(contains(last_error(), "flashjit_backward_workspace_bytes: kernel is null"));

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
  // The backward refuses the same null tensors the same way (before any kernel path is asked).
  CHECK(flashjit_backward(kernel, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                          nullptr, nullptr, 1, 1, 1, 128, 128, strides, strides, strides, strides,
                          strides, strides, strides, strides, 0.f, nullptr, nullptr, 0,
                          nullptr) == FLASHJIT_ERROR_SHAPE);
  size_t bytes = 123;
  CHECK(flashjit_backward_workspace_bytes(kernel, nullptr, nullptr, nullptr, nullptr, nullptr,
                                          nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 128, 128,
                                          strides, strides, strides, strides, strides, strides,
                                          strides, strides, 0.f, nullptr, nullptr) ==
        FLASHJIT_ERROR_USAGE);
  CHECK(contains(last_error(), "flashjit_backward_workspace_bytes: out is null"));
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

TEST_CASE("capi: the backward's flat arguments land in the BackwardArgs fields of their names") {
  // Every stride triple and pointer distinct, so that any two swapped fields show.
  const int64_t strides[8][3] = {{1, 2, 3},    {4, 5, 6},    {7, 8, 9},    {10, 11, 12},
                                 {13, 14, 15}, {16, 17, 18}, {19, 20, 21}, {22, 23, 24}};
  const int64_t* const rows[8] = {strides[0], strides[1], strides[2], strides[3],
                                  strides[4], strides[5], strides[6], strides[7]};
  flashjit_mask_args mask{fake_pointer<const int32_t>(10), fake_pointer<const int32_t>(11), 2, 3,
                          4, 5, fake_pointer<const int32_t>(12), fake_pointer<const int32_t>(13),
                          600, 700};
  const flashjit::capi::BackwardTensors tensors{
      fake_pointer(1), fake_pointer(2), fake_pointer(3), fake_pointer(4),
      fake_pointer<const float>(5), fake_pointer(6), fake_pointer(7), fake_pointer(8),
      fake_pointer(9)};
  const flashjit::BackwardArgs args = flashjit::capi::backward_args(
      "f", tensors, {2, 8, 4, 100, 200}, rows, 0.25f, &mask, fake_pointer(14), 4096);

  const flashjit::ForwardArgs& f = args.forward;
  CHECK(f.q == fake_pointer(1));
  CHECK(f.k == fake_pointer(2));
  CHECK(f.v == fake_pointer(3));
  CHECK(f.o == fake_pointer(4));
  CHECK(f.lse == fake_pointer<float>(5));
  CHECK(args.d_o == fake_pointer(6));
  CHECK(args.d_q == fake_pointer(7));
  CHECK(args.d_k == fake_pointer(8));
  CHECK(args.d_v == fake_pointer(9));
  CHECK(args.workspace == fake_pointer(14));
  CHECK(args.workspace_bytes == 4096);
  CHECK((f.batch == 2 && f.heads_q == 8 && f.heads_kv == 4));
  CHECK((f.seqlen_q == 100 && f.seqlen_k == 200));
  CHECK(f.softmax_scale == 0.25f);

  const auto same = [](const flashjit::TensorStrides& got, const int64_t* want) {
    return got.batch == want[0] && got.seq == want[1] && got.head == want[2];
  };
  CHECK(same(f.q_stride, strides[0]));
  CHECK(same(f.k_stride, strides[1]));
  CHECK(same(f.v_stride, strides[2]));
  CHECK(same(f.o_stride, strides[3]));
  CHECK(same(args.d_o_stride, strides[4]));
  CHECK(same(args.d_q_stride, strides[5]));
  CHECK(same(args.d_k_stride, strides[6]));
  CHECK(same(args.d_v_stride, strides[7]));

  CHECK(f.block_counts == mask.block_counts);
  CHECK(f.block_indices == mask.block_indices);
  CHECK((f.layout_batch == 2 && f.layout_heads == 3 && f.layout_q_blocks == 4 &&
         f.layout_max_blocks == 5));
  CHECK(f.cu_seqlens_q == mask.cu_seqlens_q);
  CHECK(f.cu_seqlens_k == mask.cu_seqlens_k);
  CHECK((f.total_q == 600 && f.total_k == 700));

  SUBCASE("without a mask the mask fields stay empty") {
    const flashjit::BackwardArgs plain = flashjit::capi::backward_args(
        "f", tensors, {2, 8, 4, 100, 200}, rows, 0.25f, nullptr, nullptr, 0);
    CHECK(plain.forward.block_counts == nullptr);
    CHECK(plain.forward.cu_seqlens_q == nullptr);
    CHECK(plain.forward.layout_batch == 0);
    CHECK(plain.workspace == nullptr);
  }
  SUBCASE("a null stride array is a usage error naming it") {
    const int64_t* const missing[8] = {rows[0], rows[1], rows[2], rows[3],
                                       rows[4], rows[5], nullptr, rows[7]};
    try {
      flashjit::capi::backward_args("flashjit_backward", tensors, {2, 8, 4, 100, 200}, missing,
                                    0.f, nullptr, nullptr, 0);
      FAIL("no error for a null d_k_strides");
    } catch (const flashjit::Error& e) {
      CHECK(e.kind() == flashjit::ErrorKind::Usage);
      CHECK(std::string(e.what()) == "flashjit_backward: d_k_strides is null");
    }
  }
}
