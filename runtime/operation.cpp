#include "runtime/operation.h"

namespace flashjit::rt {
namespace {

constexpr size_t kScratchAlign = 256;

size_t aligned_size(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

}  // namespace

size_t workspace_bytes(const std::vector<ScratchBuffer>& scratch) {
  size_t total = 0;
  for (const ScratchBuffer& buffer : scratch) total += aligned_size(buffer.bytes);
  return total;
}

std::vector<void*> scratch_pointers(const std::vector<ScratchBuffer>& scratch, void* base) {
  std::vector<void*> out;
  size_t offset = 0;
  for (const ScratchBuffer& buffer : scratch) {
    out.push_back(static_cast<char*>(base) + offset);
    offset += aligned_size(buffer.bytes);
  }
  return out;
}

OperationPlan plan_forward(const Spec& spec, const std::string& target,
                           const gen::CallTraits& call, const Tiles* tuned) {
  OperationPlan op;
  op.operation = gen::Operation::Forward;
  op.launches.push_back(gen::make_plan(spec, target, call, tuned, gen::Step::Forward));
  return op;
}

OperationPlan plan_decode(const Spec& spec, const std::string& target,
                          const gen::CallTraits& call, const Tiles& split_tiles) {
  OperationPlan op;
  op.operation = gen::Operation::Decode;
  op.launches.push_back(gen::make_plan(spec, target, call, &split_tiles, gen::Step::DecSplit));
  op.launches.push_back(gen::make_plan(spec, target, call, nullptr, gen::Step::DecCombine));
  return op;
}

OperationPlan plan_merge(const Spec& spec, const std::string& target) {
  OperationPlan op;
  op.operation = gen::Operation::Merge;
  op.launches.push_back(gen::make_plan(spec, target, {}, nullptr, gen::Step::Merge));
  return op;
}

OperationPlan plan_backward(const Spec& spec, const std::string& target,
                            const gen::CallTraits& call) {
  OperationPlan op;
  op.operation = gen::Operation::Backward;
  for (gen::Step step : {gen::Step::BwdPre, gen::Step::BwdDkDv, gen::Step::BwdDq})
    op.launches.push_back(gen::make_plan(spec, target, call, nullptr, step));
  return op;
}

}  // namespace flashjit::rt
