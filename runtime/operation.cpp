#include "runtime/operation.h"

#include <fmt/format.h>

namespace flashjit::rt {
namespace {

constexpr size_t kScratchAlign = 256;

size_t aligned_size(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// The tiles `tuned` gives `step`, or null for its heuristic (no tuned tiles, auto ones, or a
// step that takes none).
const Tiles* step_tiles(const BackwardTiles* tuned, gen::Step step) {
  if (!tuned) return nullptr;
  const Tiles* t = step == gen::Step::BwdDkDv ? &tuned->dkdv
                   : step == gen::Step::BwdDq ? &tuned->dq
                                              : nullptr;
  return t && !t->is_auto() ? t : nullptr;
}

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

void* scratch_named(const std::vector<ScratchBuffer>& scratch, const std::vector<void*>& buffers,
                    std::string_view name) {
  for (size_t i = 0; i < scratch.size() && i < buffers.size(); ++i)
    if (scratch[i].name == name) return buffers[i];
  return nullptr;
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
                            const gen::CallTraits& call, const BackwardTiles* tuned) {
  OperationPlan op;
  op.operation = gen::Operation::Backward;
  for (gen::Step step : {gen::Step::BwdPre, gen::Step::BwdDkDv, gen::Step::BwdDq})
    op.launches.push_back(gen::make_plan(spec, target, call, step_tiles(tuned, step), step));
  return op;
}

std::string backward_tiles_problem(const Spec& spec, const std::string& target,
                                   const BackwardTiles& tiles) {
  for (gen::Step step : {gen::Step::BwdDkDv, gen::Step::BwdDq}) {
    const Tiles* t = step_tiles(&tiles, step);
    if (!t) continue;
    const gen::KernelPathInfo& path = gen::choose_path(step, spec, target);
    if (std::string problem = gen::tiles_problem(spec, target, *t, path); !problem.empty())
      return fmt::format("{} {}: {}", path.name, path.tiles_label(*t), problem);
  }
  return "";
}

std::string backward_tiles_label(const BackwardTiles& tiles) {
  const auto label = [](const Tiles& t) { return t.is_auto() ? "heuristic" : gen::tiles_label(t); };
  return fmt::format("dK/dV {} dQ {}", label(tiles.dkdv), label(tiles.dq));
}

}  // namespace flashjit::rt
