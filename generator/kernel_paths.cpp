#include <fmt/format.h>

#include "generator/fwd_sm80_path.h"
#include "generator/fwd_sm90_path.h"
#include "generator/kernel_path.h"
#include "generator/targets.h"

namespace flashjit::gen {
namespace {

// In the order of preference: a call takes the first path that serves it.
constexpr const KernelPathInfo* kPaths[] = {&kFwdSm90Path, &kFwdSm80Path};

}  // namespace

const char* to_string(Operation operation) {
  switch (operation) {
    case Operation::Forward: return "forward";
    case Operation::Backward: return "backward";
    case Operation::Decode: return "decode";
  }
  return "unknown";
}

std::span<const KernelPathInfo* const> kernel_paths() { return kPaths; }

const KernelPathInfo& kernel_path(KernelPath id) {
  for (const KernelPathInfo* path : kPaths)
    if (path->id == id) return *path;
  throw Error(ErrorKind::Usage, "kernel path not in the registry (generator/kernel_paths.cpp)");
}

const char* to_string(KernelPath id) { return kernel_path(id).label; }

const KernelPathInfo& choose_path(Operation operation, const Spec& spec, const std::string& target,
                                  const CallTraits& call) {
  require_known_target(target);
  for (const KernelPathInfo* path : kPaths)
    if (path->operation == operation && path->serves(spec, target, call)) return *path;
  throw Error(ErrorKind::Usage,
              fmt::format("spec {}: no kernel path of flashjit serves the {} on {} yet", spec.name,
                          to_string(operation), target));
}

Tiles default_tiles(const Spec& spec, const std::string& target, Operation operation) {
  return choose_path(operation, spec, target).default_tiles(spec, target);
}

std::string tiles_problem(const Spec& spec, const std::string& target, const Tiles& tiles,
                          const KernelPathInfo& path) {
  const std::string problem = path.tiles_problem(padded_dims(spec), tiles, target);
  return problem.empty() ? mask_tiles_problem(spec, tiles) : problem;
}

std::string tiles_problem(const Spec& spec, const std::string& target, const Tiles& tiles,
                          Operation operation) {
  return tiles_problem(spec, target, tiles, choose_path(operation, spec, target));
}

}  // namespace flashjit::gen
