// The device tensors a backward candidate is timed on: the forward's rotation sets (Q, K, V)
// with O and LSE from the forward kernel, and dO, dQ, dK, dV a set; the check of a
// candidate's gradients against the heuristic's, and the timing of the backward alone.
#pragma once

#include <cstdint>
#include <vector>

#include "autotune/timed_inputs.h"
#include "flashjit/flashjit.h"
#include "runtime/driver.h"

namespace flashjit::tune {

struct BackwardTimedInputs {
  TimedInputs forward;                    // Q, K, V, O, LSE of each set
  std::vector<rt::DeviceBuffer> buffers;  // dO, dQ, dK, dV of each set
  std::vector<BackwardArgs> args;         // one a set
  size_t dq_elements = 0, dk_elements = 0, dv_elements = 0;
  std::vector<uint16_t> heuristic_dq, heuristic_dk, heuristic_dv;  // on set 0
};

// The backward of `forward`'s call with each gradient in its input's layout (dO in O's), its
// pointers left null.
BackwardArgs backward_args_of(const ForwardArgs& forward);

// The inputs of one timed shape; `kernel` runs the forward of every set once, for its O and
// LSE (the backward candidates do not change the forward).
BackwardTimedInputs make_backward_inputs(Kernel& kernel, const Spec& spec, const CallShape& shape,
                                         const std::vector<uint16_t>& pool);

// check_against_heuristic and time_kernel (timed_inputs.h) for the backward: `kernel`'s
// backward on set 0 against the heuristic's gradients, and its backward timed alone.
std::string check_against_heuristic(Kernel& kernel, BackwardTimedInputs& inputs, DType dtype,
                                    bool heuristic);
double time_kernel(Kernel& kernel, const BackwardTimedInputs& inputs, int warmup, int iters,
                   double hopeless_ms);

}  // namespace flashjit::tune
