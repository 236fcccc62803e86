// The tile configurations the tuner tries for a spec, and why the others were
// left out before any compile (shared memory, accumulator registers, the tile rules).
#pragma once

#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/kernel_path.h"
#include "generator/tile_rules.h"

namespace flashjit::tune {

using gen::tiles_label;

struct PrunedTiles {
  Tiles tiles;
  std::string reason;
  gen::Step step = gen::Step::Forward;  // whose tiles they are
};

struct CandidateSpace {
  std::vector<Tiles> candidates;  // the heuristic's default first, then the grid in order
  std::vector<PrunedTiles> pruned;
};

// Throws Error(Usage) for a spec whose forward (or, with `backward`, backward) tuning cannot
// serve, whatever the GPU: a block_sparse mask (its speed follows the run-time layout) and, for
// the forward, tiles the spec fixes itself.
void check_tunable(const Spec& spec, bool backward);

// The spec's primary kernel path's tuning grid (KernelPathInfo::tuning_grid), filtered by the
// path's tile rules, the mask and its tuning_problem (the sm80 path's register estimate).
// Throws Error(Usage) for a spec the tuner cannot serve (explicit tiles, a block_sparse
// layout only known at run time, an unknown target).
CandidateSpace candidate_space(const Spec& spec, const std::string& target);

// The backward's: its dK/dV and dQ steps' primary paths (those whose tiles the tune DB holds),
// each step's grid filtered as the forward's. The steps are tuned one after the other: the two
// kernels run in turn and neither reads what the other writes, so each one's time hardly
// depends on the other's tiles.
struct BackwardCandidateSpace {
  const gen::KernelPathInfo* dkdv_path = nullptr;
  const gen::KernelPathInfo* dq_path = nullptr;
  // The heuristic's tiles first (auto for a step whose path has no tuning grid); then each
  // other dK/dV tiling with the heuristic's dQ tiles; from first_dq on, each other dQ tiling
  // with the heuristic's dK/dV tiles.
  std::vector<BackwardTiles> candidates;
  size_t first_dq = 0;
  std::vector<PrunedTiles> pruned;
};
// Throws Error(Usage) as candidate_space does, but not for a spec's own `tiles:` (the
// forward's only).
BackwardCandidateSpace backward_candidate_space(const Spec& spec, const std::string& target);

}  // namespace flashjit::tune
