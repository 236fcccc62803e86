#include "autotune/candidates.h"

#include <fmt/format.h>

#include "generator/kernel_path.h"
#include "generator/targets.h"

namespace flashjit::tune {

CandidateSpace candidate_space(const Spec& spec, const std::string& target) {
  spec.validate();
  if (!spec.tiles.is_auto())
    throw Error(ErrorKind::Usage,
                fmt::format("spec {} fixes its tiles ({}); remove `tiles:` to tune it", spec.name,
                            tiles_label(spec.tiles)));
  if (spec.mask == MaskKind::BlockSparse)
    throw Error(ErrorKind::Usage,
                fmt::format("spec {}: a block_sparse kernel's speed depends on the run-time "
                            "layout it is given, which tuning does not know; give it tiles "
                            "(they must divide block_q / block_k) or leave them to the heuristic",
                            spec.name));
  if (!gen::is_known_target(target))
    throw Error(ErrorKind::Usage, fmt::format("unknown target '{}'", target));

  const gen::KernelPathInfo& path = gen::choose_path(gen::Step::Forward, spec, target);
  const gen::PaddedDims dims = gen::padded_dims(spec);
  CandidateSpace space;
  const Tiles heuristic = path.default_tiles(spec, target);
  space.candidates.push_back(heuristic);
  for (const Tiles& t : path.tuning_grid(spec)) {
    if (t == heuristic) continue;
    std::string reason = gen::tiles_problem(spec, target, t, path);
    if (reason.empty()) reason = path.tuning_problem(dims, t);
    if (reason.empty())
      space.candidates.push_back(t);
    else
      space.pruned.push_back({t, std::move(reason)});
  }
  return space;
}

}  // namespace flashjit::tune
