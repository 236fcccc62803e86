// The tuning loop of one spec's forward on this process's GPU: candidate tiles compile on CPU
// threads while the GPU times those already built, on the benchmark's shapes, every candidate
// checked (fp64 reference on a small odd shape, then against the heuristic kernel's output on
// the timed shape) before it can win.
#pragma once

#include "autotune/tile_tuning.h"
#include "flashjit/flashjit.h"

namespace flashjit::tune {

using SpecTuneResult = TuneResult<Tiles, TuneEntry>;

// Throws Error(NoDevice) without a GPU, Error(Usage) for a spec that cannot be tuned, and
// Error(Compile/Driver) when the heuristic kernel itself cannot be built or checked.
SpecTuneResult tune_spec(Runtime& runtime, const Spec& spec, const TuneOptions& options,
                         const Progress& progress);

}  // namespace flashjit::tune
