#include "runtime/operation.h"

namespace flashjit::rt {

size_t OperationPlan::workspace_bytes() const {
  constexpr size_t kAlign = 256;
  size_t total = 0;
  for (const ScratchBuffer& buffer : scratch) total += (buffer.bytes + kAlign - 1) / kAlign * kAlign;
  return total;
}

OperationPlan plan_forward(const Spec& spec, const std::string& target,
                           const gen::CallTraits& call, const Tiles* tuned) {
  OperationPlan op;
  op.operation = gen::Operation::Forward;
  op.launches.push_back(gen::make_plan(spec, target, call, tuned, gen::Operation::Forward));
  return op;
}

OperationPlan plan_backward(const Spec& spec, const std::string& target,
                            const gen::CallTraits& call) {
  OperationPlan op;
  op.operation = gen::Operation::Backward;
  op.launches.push_back(gen::make_plan(spec, target, call, nullptr, gen::Operation::Backward));
  return op;
}

}  // namespace flashjit::rt
