// An operation (forward, backward, decode) as the runtime runs it: launches of kernel paths,
// in order on the caller's stream, and the scratch buffers they pass between them (D, the
// fp32 dQ accumulator, partial O and LSE), sized from the call. The forward is one launch.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/plan.h"

namespace flashjit::rt {

struct ScratchBuffer {
  std::string name;  // "dq_accum"
  size_t bytes = 0;
  bool zeroed = false;  // the runtime zeroes it before the launches
};

// The workspace `scratch` takes, each buffer starting on a 256-byte boundary.
size_t workspace_bytes(const std::vector<ScratchBuffer>& scratch);
// Where each buffer starts in a workspace at `base`, in order.
std::vector<void*> scratch_pointers(const std::vector<ScratchBuffer>& scratch, void* base);
// The start of the buffer called `name` among `buffers` (scratch_pointers'), or null where
// `scratch` has none.
void* scratch_named(const std::vector<ScratchBuffer>& scratch, const std::vector<void*>& buffers,
                    std::string_view name);

// The launches of an operation, in order; the scratch they share depends on the call's shape
// and comes from the operation's own function (backward_scratch).
struct OperationPlan {
  gen::Operation operation = gen::Operation::Forward;
  std::vector<gen::Plan> launches;
};

// The forward of `spec` on `target` for a call with these traits; `tuned` as make_plan takes.
OperationPlan plan_forward(const Spec& spec, const std::string& target,
                           const gen::CallTraits& call, const Tiles* tuned);
// Decode: the split kernel with `split_tiles` (dec_sm80_tiles for the call's packed rows),
// then the combine, which runs only when the call splits its keys.
OperationPlan plan_decode(const Spec& spec, const std::string& target,
                          const gen::CallTraits& call, const Tiles& split_tiles);
// The merge of two partial results: one launch (its kernel reads elements one at a time, so
// the plan is the same for every alignment).
OperationPlan plan_merge(const Spec& spec, const std::string& target);
// The backward: D = rowsum(dO * O), then dK/dV and dQ (deterministic ones when the spec asks;
// else on sm_90a dK/dV accumulating dQ, then dQ's conversion). `tuned` (if non-null) gives
// the dK/dV and dQ steps' tiles as make_plan takes them (an auto step, or a call that falls
// back from the primary path, takes the heuristic's). Throws Error(Usage) naming the step
// when no path serves one, or when tuned tiles cannot run its primary path.
OperationPlan plan_backward(const Spec& spec, const std::string& target,
                            const gen::CallTraits& call, const BackwardTiles* tuned = nullptr);
// Why `tiles` cannot run the backward of `spec` on `target` ("" when they can): each step's
// tiles that are not auto against the primary path of that step.
std::string backward_tiles_problem(const Spec& spec, const std::string& target,
                                   const BackwardTiles& tiles);
// "dK/dV m96n128w12s2 dQ m128n128w12s2" ("heuristic" for an auto step), for messages.
std::string backward_tiles_label(const BackwardTiles& tiles);

}  // namespace flashjit::rt
