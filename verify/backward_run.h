// One checked and timed run of a backward kernel on the GPU, beside run_attention and shared
// by `flashjit run --backward` and the GPU tests: random (or the user's) Q, K, V and dO,
// flashjit's own forward for O and LSE, dQ, dK, dV poisoned with NaN before the backward
// runs, then compared with the fp64 reference under FlashAttention's gradient rule
// (gradient_error_bound states it), the backward alone timed with CUDA events.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "verify/attention_run.h"
#include "verify/compare.h"

namespace flashjit::verify {

struct BackwardRunOptions {
  RunOptions run;              // seed, distribution, warmup, iters, keep_outputs
  int deterministic_runs = 0;  // > 1: run the backward this often, require bitwise-equal outputs
};

struct BackwardRunResult {
  std::string kernels;   // names of the kernels the backward call loaded (backward_run.cpp)
  ErrorStats dq, dk, dv;  // against the fp64 reference
  double dq_bound = 0, dk_bound = 0, dv_bound = 0;  // the largest error each may have
  int64_t outside_writes = 0;  // poisoned padding / guard elements the backward overwrote
  bool passed = false;
  std::string failure;  // why it failed, "" when passed
  uint64_t seed = 0;    // of the random inputs (0 with user inputs)
  double time_ms = 0;   // median over RunOptions::iters backward launches
  double tflops = 0;
  bool deterministic_checked = false;  // deterministic_runs > 1 ran and compared
  // In Q's, K's and V's contiguous logical layouts, if keep_outputs.
  std::vector<float> dq_values, dk_values, dv_values;
};

// FlashAttention's acceptance rule for gradients (hopper/test_flash_attn.py): a kernel's
// gradient G passes against the fp64 reference R when
//   max |G - R| <= 2 max(max |L - R|, F) + 2 max |fl32(fl32(R) + 0.3) - 0.3 - fl32(R)| + 2 C,
// L being the same computation done in the low dtype the way PyTorch does it
// (lowp_backward): twice the error of an ordinary low-precision implementation, plus twice
// the rounding an fp32 value of R's size carries (which keeps the bound above zero where L
// happens to be exact). C (ours, not FlashAttention's: ReferenceGradients::dq_cancellation
// and dk_cancellation, 0 for dV) is the fp32 rounding left by the cancellation in dS, which
// the rule misses where dS is exactly 0. Returns the right-hand side. run_backward adds one
// more term to dQ's and dK's bounds: twice how far D = rowsum(dO ∘ O) moves them when O is
// read in the element type, as the recomputing backward reads it (backward_run.cpp says how
// it is bounded); the references compute D from P and dP, exactly. F (`lowp_floor`, ours too)
// is the least max |L - R| counts for: three standard deviations of the error that rounding
// P and dS to the dtype gives the tensor (rounding_floor), which the largest of a small
// tensor's L errors can fall short of by chance.
double gradient_error_bound(std::span<const double> reference, std::span<const double> lowp,
                            double cancellation = 0, double lowp_floor = 0);

// F for a tensor of rounding spread `spread` (ReferenceGradients::dq_rounding_spread and its
// siblings): three standard deviations of the error rounding P and dS to `dtype` gives an
// element, 3 u / sqrt(3) spread with u the dtype's unit roundoff. The low-dtype computation
// rounds them too, but the largest of its errors over a tensor of a few elements can fall
// well below that: at head dim 1, 128 queries against 17 keys (dV: 17 elements), 4 of 60 GPU
// runs failed dV without F, as a CPU replay of the kernel's arithmetic did, and the replay
// found dQ and dK failing so too (1 query row: a few elements) (bench/NOTES.md entry 42).
double rounding_floor(double spread, DType dtype);

// FLOPs of the backward pass (DESIGN.md): 2.5 x forward_flops.
double backward_flops(const Spec& spec, const Shape& shape);

// Throws Error(Shape) if the shape does not fit the layout (or user inputs, which then need
// d_o, do not fit it), Error(NoDevice) without a GPU, and whatever Kernel::forward and
// Kernel::backward throw.
BackwardRunResult run_backward(Runtime& runtime, const Spec& spec, const Shape& shape,
                               const BackwardRunOptions& options,
                               const UserInputs* inputs = nullptr);

}  // namespace flashjit::verify
