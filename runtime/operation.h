// An operation (forward, backward, decode) as the runtime runs it: launches of kernel paths,
// in order on the caller's stream, and the scratch buffers they pass between them (D, the
// fp32 dQ accumulator, partial O and LSE), sized from the call. The forward is one launch.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/plan.h"

namespace flashjit::rt {

struct ScratchBuffer {
  std::string name;  // "dq_accum"
  size_t bytes = 0;
};

struct OperationPlan {
  gen::Operation operation = gen::Operation::Forward;
  std::vector<gen::Plan> launches;
  std::vector<ScratchBuffer> scratch;
  // The workspace the scratch buffers take, each starting on a 256-byte boundary.
  size_t workspace_bytes() const;
};

// The forward of `spec` on `target` for a call with these traits; `tuned` as make_plan takes.
OperationPlan plan_forward(const Spec& spec, const std::string& target,
                           const gen::CallTraits& call, const Tiles* tuned);
// The backward: Error(Usage) until kernel paths serve it (choose_path says which is missing).
OperationPlan plan_backward(const Spec& spec, const std::string& target,
                            const gen::CallTraits& call);

}  // namespace flashjit::rt
