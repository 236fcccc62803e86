// The tile configurations the tuner tries for a spec, and why the others were
// left out before any compile (shared memory, accumulator registers, the tile rules).
#pragma once

#include <string>
#include <vector>

#include "flashjit/flashjit.h"

namespace flashjit::tune {

struct PrunedTiles {
  Tiles tiles;
  std::string reason;
};

struct CandidateSpace {
  std::vector<Tiles> candidates;  // the heuristic's default first, then the grid in order
  std::vector<PrunedTiles> pruned;
};

// fp32 accumulator registers a thread holds for `tiles`: each warp owns block_m / warps query
// rows in groups of 16 (one m16 MMA row block), and for each group a thread keeps
// dv_slice / 2 floats of O and block_n / 2 floats of S.
int accumulator_registers(int dv_slice, const Tiles& tiles);
// Above this the kernel cannot avoid spilling: 255 registers a thread minus the ~30 that the
// addresses, loop counters, softmax row statistics and MMA operand fragments need at least.
inline constexpr int kMaxAccumulatorRegisters = 224;

// For the sm80 kernel: the grid block_m {64, 128} x block_n {32, 64, 128} x warps {4, 8} x
// stages {2, 3} (plus block_n 16 for head dims past 192, where the heuristic itself uses
// narrow key blocks), filtered by the sm80 tile rules and shared memory (sm80_tiles_problem)
// and by accumulator_registers. For the warp-specialised sm90 kernel: block_n {48, 64, 80,
// 96, 112, 128, 160, 176, 192} x stages {2, 3, 4}, filtered by sm90_tiles_problem (shared memory, consumer
// registers). Throws Error(Usage) for a spec the tuner cannot serve (explicit tiles, an
// unknown target).
CandidateSpace candidate_space(const Spec& spec, const std::string& target);

// "m128n64w4s3"
std::string tiles_label(const Tiles& tiles);

}  // namespace flashjit::tune
