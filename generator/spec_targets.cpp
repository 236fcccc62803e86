#include "generator/spec_targets.h"

#include <fmt/format.h>

#include "generator/kernel_path.h"
#include "generator/targets.h"

namespace flashjit::gen {

std::vector<std::string> allowed_targets(const Spec& spec) {
  if (spec.arch == Arch::Sm90a) return {"sm_90a"};
  return known_targets();
}

std::optional<SpecProblem> target_problem(const Spec& spec, const std::string& target) {
  if (spec.arch == Arch::Sm90a && target != "sm_90a")
    return SpecProblem{"arch", fmt::format("sm90a kernels run on sm_90a only, not {}", target),
                       std::string(allowed_values("arch"))};
  const KernelPathInfo& path = choose_path(Step::Forward, spec, target);
  const std::string allowed = fmt::format(
      "auto, or tiles the {} kernel runs on {} (configs/README.md, tiles)", path.label, target);
  if (spec.tiles.is_auto()) {
    try {
      path.default_tiles(spec, target, {});
      return std::nullopt;
    } catch (const Error& error) {
      return SpecProblem{"tiles", fmt::format("auto: {}", error.what()), allowed};
    }
  }
  const std::string why = tiles_problem(spec, target, spec.tiles, path);
  if (why.empty()) return std::nullopt;
  return SpecProblem{"tiles",
                     fmt::format("the {} kernel, which {} runs, cannot run them: {}", path.label,
                                 target, why),
                     allowed};
}

}  // namespace flashjit::gen
