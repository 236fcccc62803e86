// One candidate measured on one shape (its output checked against the heuristic's, then timed)
// and the fastest kept: the step both tuners take for every candidate and shape.
#pragma once

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "autotune/timed_inputs.h"
#include "generator/tile_rules.h"
#include "runtime/operation.h"

namespace flashjit::tune {

// A candidate whose first timed launch is this much slower than the best so far cannot win:
// it is not timed further (this keeps hopeless candidates from eating the budget).
inline constexpr double kHopeless = 1.5;

inline std::string candidate_label(const Tiles& tiles) { return gen::tiles_label(tiles); }
inline std::string candidate_label(const BackwardTiles& tiles) {
  return rt::backward_tiles_label(tiles);
}
inline std::string candidate_label(int kv_splits) {
  return fmt::format("{} split{}", kv_splits, kv_splits == 1 ? "" : "s");
}

// The heuristic's candidate (measured first) and the fastest on one shape.
template <class Candidate>
struct Fastest {
  Candidate heuristic{};
  double heuristic_ms = 0;
  Candidate best{};  // after settle(): the heuristic's unless another beat it by min_gain
  double best_ms = 0;
  int timed = 0;
  int rejected = 0;  // candidates whose output differed from the heuristic's

  // Runs `candidate` (loaded in `kernel`) on `inputs` (TimedInputs, or the backward's): the
  // heuristic's run, the first, keeps its output as the reference; another is rejected when
  // its output differs, else timed (and given up on once its first launch is hopeless).
  // Returns the progress line's end.
  template <class Inputs>
  std::string measure(Kernel& kernel, Inputs& inputs, DType dtype, const Candidate& candidate,
                      bool is_heuristic, const TimingOptions& timing) {
    if (const std::string why = check_against_heuristic(kernel, inputs, dtype, is_heuristic);
        !why.empty()) {
      ++rejected;
      return "rejected, " + why;
    }
    const double hopeless = is_heuristic ? INFINITY : kHopeless * best_ms;
    const double ms = time_kernel(kernel, inputs, timing.warmup, timing.iters, hopeless);
    ++timed;
    if (is_heuristic) {
      heuristic = best = candidate;
      heuristic_ms = best_ms = ms;
    } else if (ms < best_ms) {
      best = candidate;
      best_ms = ms;
    }
    return fmt::format("{:.4f} ms{}  best {} {:.4f} ms ({:.2f}x heuristic)", ms,
                       ms >= hopeless ? " (hopeless, stopped)" : "", candidate_label(best),
                       best_ms, heuristic_ms / best_ms);
  }

  // Within min_gain of the heuristic is noise: the tested default stays unless the best beat
  // it by more. Returns whether it did.
  bool settle(const TimingOptions& timing) {
    if (best_ms <= heuristic_ms * (1 - timing.min_gain)) return true;
    best = heuristic;
    best_ms = heuristic_ms;
    return false;
  }
};

}  // namespace flashjit::tune
