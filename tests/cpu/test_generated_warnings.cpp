// The generated sources compile without NVRTC warnings: a user who sets FLASHJIT_VERBOSE sees
// the log, and a warning there (a constant the kernel never names, a division by a
// block-mask constant that is 0 without a mask) reads as a defect of the kernel.
#include <doctest/doctest.h>

#include <string>

#include "flashjit/flashjit.h"
#include "generator/emit.h"
#include "generator/plan.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/operation.h"

namespace flashjit {
namespace {

void check_no_warnings(const gen::Plan& plan) {
  CAPTURE(plan.kernel_name);
  const rt::NvrtcOutput out =
      rt::nvrtc_compile(gen::emit_source(plan), plan.kernel_name + ".cu", plan.target);
  CHECK_MESSAGE(out.log.find("warning") == std::string::npos, out.log);
}

}  // namespace

TEST_CASE("nvrtc: the backward's kernels compile without warnings, without a mask and with one") {
  // d64 and d192 take the sm90 dK/dV kernels that include the swapped consumers' file without
  // instantiating them; sm_80 takes the dK/dV kernel whose block-mask test is discarded.
  for (const char* yaml :
       {"head_dim: 64\n", "head_dim: 192\n",
        "head_dim: 64\nmask: {block_sparse: {block_q: 128, block_k: 128}}\n"})
    for (const char* target : {"sm_80", "sm_90a"})
      for (const gen::Plan& plan :
           rt::plan_backward(Spec::from_yaml(yaml), target, {}).launches)
        check_no_warnings(plan);
}

}  // namespace flashjit
