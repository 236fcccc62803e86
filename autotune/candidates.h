// The tile configurations the tuner tries for a spec, and why the others were
// left out before any compile (shared memory, accumulator registers, the tile rules).
#pragma once

#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/tile_rules.h"

namespace flashjit::tune {

using gen::tiles_label;

struct PrunedTiles {
  Tiles tiles;
  std::string reason;
};

struct CandidateSpace {
  std::vector<Tiles> candidates;  // the heuristic's default first, then the grid in order
  std::vector<PrunedTiles> pruned;
};

// The spec's primary kernel path's tuning grid (KernelPathInfo::tuning_grid), filtered by the
// path's tile rules, the mask and its tuning_problem (the sm80 path's register estimate).
// Throws Error(Usage) for a spec the tuner cannot serve (explicit tiles, a block_sparse
// layout only known at run time, an unknown target).
CandidateSpace candidate_space(const Spec& spec, const std::string& target);

}  // namespace flashjit::tune
