// The step both tile tuners (the forward's and the backward's) take for every candidate in
// turn: wait for its compile, drop it if it failed or spills, check it against the fp64
// reference on a small odd shape, then hand it to the tuner to time on each shape; the
// heuristic's candidate (the first) must pass every step, and the budget ends the loop.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autotune/compile_pool.h"
#include "autotune/timed_inputs.h"

namespace flashjit::tune {

// The fp64 check of one candidate.
struct ReferenceCheck {
  std::string kernels;  // what ran, for the message when the heuristic's fails
  std::string failure;  // "" when it passed
};

struct CandidateSteps {
  std::string spec_name;
  std::function<std::string(size_t i)> label;
  std::function<ReferenceCheck(size_t i)> reference_check;
  // Times candidate i on every shape, with a progress line each; `line` starts them.
  std::function<void(size_t i, const std::string& line)> measure;
};

struct LoopOutcome {
  std::vector<std::string> dropped;  // "m128n32w4s2: spills 64 bytes" and other reasons
  bool budget_exhausted = false;
};

// Runs candidates 0..count-1 (0: the heuristic's) through `steps`. Throws Error(Compile) when
// the heuristic's kernels do not compile and Error(Usage) when they fail the fp64 check.
LoopOutcome run_candidates(size_t count, CompilePool& compiles, const CandidateSteps& steps,
                           const TimingOptions& timing, const TuningClock& clock,
                           const Progress& progress);

}  // namespace flashjit::tune
