#include "autotune/candidates.h"

#include <fmt/format.h>

#include "generator/targets.h"

namespace flashjit::tune {
namespace {

void require_known_target(const std::string& target) {
  if (!gen::is_known_target(target))
    throw Error(ErrorKind::Usage, fmt::format("unknown target '{}'", target));
}

// The tilings of `path`'s grid other than `heuristic` that it can run for `spec` on `target`,
// in grid order; the others go to `pruned` with the reason.
std::vector<Tiles> filter_grid(const Spec& spec, const std::string& target,
                               const gen::KernelPathInfo& path, const Tiles& heuristic,
                               std::vector<PrunedTiles>& pruned) {
  const gen::PaddedDims dims = gen::padded_dims(spec);
  std::vector<Tiles> kept;
  for (const Tiles& t : path.tuning_grid(spec)) {
    if (t == heuristic) continue;
    std::string reason = gen::tiles_problem(spec, target, t, path);
    if (reason.empty()) reason = path.tuning_problem(dims, t);
    if (reason.empty())
      kept.push_back(t);
    else
      pruned.push_back({t, std::move(reason), path.step});
  }
  return kept;
}

}  // namespace

void check_tunable(const Spec& spec, bool backward) {
  spec.validate();
  if (!backward && !spec.tiles.is_auto())
    throw Error(ErrorKind::Usage,
                fmt::format("spec {} fixes its tiles ({}); remove `tiles:` to tune it", spec.name,
                            tiles_label(spec.tiles)));
  if (spec.mask == MaskKind::BlockSparse)
    throw Error(ErrorKind::Usage,
                fmt::format("spec {}: a block_sparse kernel's speed depends on the run-time "
                            "layout it is given, which tuning does not know; {}",
                            spec.name,
                            backward ? "leave the backward's tiles to the heuristic"
                                     : "give it tiles (they must divide block_q / block_k) or "
                                       "leave them to the heuristic"));
}

CandidateSpace candidate_space(const Spec& spec, const std::string& target) {
  check_tunable(spec, false);
  require_known_target(target);
  const gen::KernelPathInfo& path = gen::choose_path(gen::Step::Forward, spec, target);
  CandidateSpace space;
  const Tiles heuristic = path.default_tiles(spec, target, {});
  space.candidates.push_back(heuristic);
  for (const Tiles& t : filter_grid(spec, target, path, heuristic, space.pruned))
    space.candidates.push_back(t);
  return space;
}

BackwardCandidateSpace backward_candidate_space(const Spec& spec, const std::string& target) {
  check_tunable(spec, true);
  require_known_target(target);
  BackwardCandidateSpace space;
  space.dkdv_path = &gen::choose_path(gen::Step::BwdDkDv, spec, target);
  space.dq_path = &gen::choose_path(gen::Step::BwdDq, spec, target);
  // A step whose path tunes nothing (dQ's conversion) stays auto: the heuristic's.
  const auto heuristic_of = [&](const gen::KernelPathInfo& path) {
    return path.tuning_grid(spec).empty() ? Tiles{} : path.default_tiles(spec, target, {});
  };
  const BackwardTiles heuristic{heuristic_of(*space.dkdv_path), heuristic_of(*space.dq_path)};
  space.candidates.push_back(heuristic);
  for (const Tiles& t : filter_grid(spec, target, *space.dkdv_path, heuristic.dkdv, space.pruned))
    space.candidates.push_back({t, heuristic.dq});
  space.first_dq = space.candidates.size();
  for (const Tiles& t : filter_grid(spec, target, *space.dq_path, heuristic.dq, space.pruned))
    space.candidates.push_back({heuristic.dkdv, t});
  return space;
}

}  // namespace flashjit::tune
