#include "autotune/candidate_loop.h"

#include <fmt/format.h>

namespace flashjit::tune {

LoopOutcome run_candidates(size_t n, CompilePool& compiles, const CandidateSteps& steps,
                           const TimingOptions& timing, const TuningClock& clock,
                           const Progress& progress) {
  LoopOutcome out;
  for (size_t i = 0; i < n; ++i) {
    const std::string label = steps.label(i);
    const bool heuristic = i == 0;
    if (!heuristic && clock.budget_spent(timing)) {
      out.budget_exhausted = true;
      compiles.stop();
      progress(fmt::format("budget of {} s spent: {} candidates left untimed", timing.budget_s,
                           n - i));
      break;
    }
    const std::string line = fmt::format("[{:2}/{}] {}", i + 1, n, label);
    const CompileOutcome compiled = compiles.wait(i);
    const auto drop = [&](const std::string& why) {
      out.dropped.push_back(fmt::format("{}: {}", label, why));
      progress(fmt::format("{} dropped: {}", line, why));
    };
    if (!compiled.error.empty()) {
      if (heuristic)
        throw Error(ErrorKind::Compile,
                    fmt::format("the heuristic kernel of {} does not compile: {}", steps.spec_name,
                                compiled.error));
      drop(compiled.error);
      continue;
    }
    if (const int spilled = spilled_bytes(compiled); spilled > 0 && !heuristic) {
      drop(fmt::format("spills {} bytes", spilled));
      continue;
    }
    progress(fmt::format("{} compiled: {}", line, describe(compiled)));

    const ReferenceCheck checked = steps.reference_check(i);
    if (!checked.failure.empty()) {
      if (heuristic)
        throw Error(ErrorKind::Usage,
                    fmt::format("the heuristic kernel {} fails the fp64 reference check: {}",
                                checked.kernels, checked.failure));
      drop("fails the fp64 reference check: " + checked.failure);
      continue;
    }
    steps.measure(i, line);
  }
  return out;
}

}  // namespace flashjit::tune
