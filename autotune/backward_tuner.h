// The tile tuning of one spec's backward on this process's GPU (`flashjit tune --backward`):
// the dK/dV step's tilings first, then the dQ step's, each dQ tiling timed beside each
// bucket's fastest dK/dV so far (autotune/candidates.h says why the steps go one at a time).
// Every candidate runs as the whole backward (D pre-pass, dK/dV, dQ) after a forward that
// gives O and LSE, and only the backward is timed; it passes the fp64 reference on a small odd
// shape and matches the heuristic's gradients on the timed shape before it can win.
#pragma once

#include "autotune/tile_tuning.h"
#include "flashjit/flashjit.h"

namespace flashjit::tune {

using BackwardTuneResult = TuneResult<BackwardTiles, BackwardEntry>;

// Tunes on GPU `device` (a CUDA driver ordinal), through a Runtime of its own whose tile
// source serves the candidates. Throws Error(NoDevice) without a GPU, Error(Usage) for a spec
// that cannot be tuned (a block_sparse mask; packed tensors that take another path than the
// spec's primary one, whose tiles alone the tune DB holds), and Error(Compile) when the
// heuristic's kernels cannot be built or checked.
BackwardTuneResult tune_backward(int device, const Spec& spec, const TuneOptions& options,
                                 const Progress& progress);

}  // namespace flashjit::tune
