// What the runtime does without a GPU (the driver is optional), and the checks and packing
// of a forward call's arguments.
#include <cmath>
#include <string>

#include <doctest/doctest.h>

#include "flashjit/flashjit.h"
#include "runtime/driver.h"
#include "runtime/forward_params.h"

using flashjit::Error;
using flashjit::ErrorKind;
using flashjit::ForwardArgs;
using flashjit::Runtime;
using flashjit::Spec;
using flashjit::rt::Driver;

namespace {

Spec spec_hd100() {
  Spec spec;
  spec.name = "hd100";
  spec.head_dim_qk = 100;
  spec.head_dim_v = 100;
  return spec;
}

// Valid arguments with fake (never dereferenced) device pointers.
ForwardArgs valid_args(const Spec& spec) {
  ForwardArgs args = ForwardArgs::contiguous(spec, 2, 8, 2, 33, 65);
  alignas(16) static char storage[16];  // never dereferenced: the checks read only addresses
  alignas(16) static float lse[4];
  args.q = args.k = args.v = storage;
  args.o = storage;
  args.lse = lse;
  return args;
}

std::string shape_error(const ForwardArgs& args) {
  try {
    flashjit::rt::check_forward_args(spec_hd100(), args);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Shape);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("driver: available() answers without throwing, with a reason when false") {
  bool available = false;
  CHECK_NOTHROW(available = Driver::available());
  CHECK(Runtime().has_device() == available);
  if (available) {
    CHECK(Driver::unavailable_reason().empty());
  } else {
    CHECK(Driver::unavailable_reason().find("no usable CUDA GPU") != std::string::npos);
    CHECK_THROWS_AS(Driver::get(), Error);
  }
}

TEST_CASE("runtime: kernel() without a GPU throws NoDevice and says what works instead") {
  if (Driver::available()) return;  // this machine has a GPU: the GPU tests cover kernel()
  Runtime runtime;
  try {
    runtime.kernel(spec_hd100());
    FAIL("Runtime::kernel did not throw without a GPU");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::NoDevice);
    const std::string message = e.what();
    CHECK(message.find("hd100") != std::string::npos);
    CHECK(message.find("no usable CUDA GPU") != std::string::npos);
    CHECK(message.find("Runtime::compile") != std::string::npos);
  }
  CHECK_THROWS_AS(runtime.device(), Error);
}

TEST_CASE("runtime: one runtime a GPU ordinal; compiling needs none, kernels need that GPU") {
  flashjit::RuntimeOptions far;
  far.device = 7;
  Runtime first, second(far);
  // Compiling targets an architecture, not a GPU: both runtimes compile, with or without one.
  CHECK(second.compile(spec_hd100(), "sm_80").kernel_name ==
        first.compile(spec_hd100(), "sm_80").kernel_name);
  if (!Driver::available()) {
    CHECK_FALSE(second.has_device());
    CHECK_THROWS_AS(second.kernel(spec_hd100()), Error);
    return;
  }
  // With GPUs: an ordinal past the last is no device and a usage error naming the count.
  far.device = Driver::gpu_count();
  Runtime missing(far);
  CHECK_FALSE(missing.has_device());
  try {
    missing.kernel(spec_hd100());
    FAIL("a runtime for a GPU that does not exist made a kernel");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Usage);
    CHECK(std::string(e.what()).find("does not exist") != std::string::npos);
  }
}

TEST_CASE("forward arguments: valid ones pass") {
  CHECK_NOTHROW(flashjit::rt::check_forward_args(spec_hd100(), valid_args(spec_hd100())));
}

TEST_CASE("forward arguments: each bad one is named with its value") {
  ForwardArgs args = valid_args(spec_hd100());
  SUBCASE("null pointer") {
    args.k = nullptr;
    CHECK(shape_error(args).find("non-null") != std::string::npos);
  }
  SUBCASE("batch") {
    args.batch = 0;
    CHECK(shape_error(args).find("batch = 0") != std::string::npos);
  }
  SUBCASE("seqlen_k") {
    args.seqlen_k = -3;
    CHECK(shape_error(args).find("seqlen_k = -3") != std::string::npos);
  }
  SUBCASE("heads_q not a multiple of heads_kv") {
    args.heads_q = 7;
    const std::string message = shape_error(args);
    CHECK(message.find("heads_q = 7") != std::string::npos);
    CHECK(message.find("heads_kv = 2") != std::string::npos);
  }
  SUBCASE("stride along a dimension longer than one") {
    args.v_stride.seq = 0;
    CHECK(shape_error(args).find("v_stride.seq = 0") != std::string::npos);
  }
  SUBCASE("negative softmax scale") {
    args.softmax_scale = -1.f;
    CHECK(shape_error(args).find("softmax_scale") != std::string::npos);
  }
  SUBCASE("an element pointer off 2-byte alignment") {
    args.v = static_cast<const char*>(args.v) + 1;
    CHECK(shape_error(args).find("2-byte aligned") != std::string::npos);
  }
  SUBCASE("an LSE pointer off 4-byte alignment") {
    args.lse = reinterpret_cast<float*>(reinterpret_cast<char*>(args.lse) + 2);
    CHECK(shape_error(args).find("4-byte aligned") != std::string::npos);
  }
}

TEST_CASE("forward arguments: a zero stride is fine along a dimension of one element") {
  ForwardArgs args = valid_args(spec_hd100());
  args.batch = 1;
  args.q_stride.batch = 0;
  CHECK_NOTHROW(flashjit::rt::check_forward_args(spec_hd100(), args));
}

TEST_CASE("kernel parameters: pointers, strides, GQA group and the scale in the exp2 domain") {
  flashjit::gen::Plan plan;
  plan.spec = spec_hd100();
  ForwardArgs args = valid_args(plan.spec);
  args.k_stride = {1000, 100, 10};

  FwdParams params = flashjit::rt::make_fwd_params(plan, args);
  CHECK(params.q == args.q);
  CHECK(params.o == args.o);
  CHECK(params.lse == args.lse);
  CHECK(params.k_batch_stride == 1000);
  CHECK(params.k_seq_stride == 100);
  CHECK(params.k_head_stride == 10);
  CHECK(params.q_seq_stride == args.q_stride.seq);
  CHECK(params.seqlen_q == 33);
  CHECK(params.seqlen_k == 65);
  CHECK(params.heads_per_kv == 4);
  CHECK(params.softmax_scale == doctest::Approx(1.0 / std::sqrt(100.0)));
  CHECK(params.scale_log2 == doctest::Approx(0.1 * 1.4426950408889634));

  args.softmax_scale = 0.5f;
  params = flashjit::rt::make_fwd_params(plan, args);
  CHECK(params.softmax_scale == 0.5f);
  CHECK(params.scale_log2 == doctest::Approx(0.5 * 1.4426950408889634));
}
