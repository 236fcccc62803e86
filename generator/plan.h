// A Plan is a Spec resolved for one kernel path, one compile target, one tile configuration
// and one call's traits (alignment, TMA, varlen): everything the emitter bakes into the
// source as a constant. Nothing here looks at pointers: the runtime derives the CallTraits.
#pragma once

#include <string>

#include "flashjit/flashjit.h"
#include "generator/kernel_path.h"
#include "generator/targets.h"

namespace flashjit::gen {

struct Plan {
  Spec spec;
  const KernelPathInfo* path = nullptr;
  std::string target;  // "sm_80" ...
  CallTraits call;
  Tiles tiles;         // resolved, never auto
  int d_qk_pad = 0;    // head_dim_qk rounded up to the MMA k granularity
  int d_v_pad = 0;     // head_dim_v rounded up to 16
  // The path's ColumnSplit: dv_splits CTAs share a row block, each computing dk_slice
  // columns of a qk-wide output and dv_slice of a v-wide one (padded).
  int dk_slice = 0;
  int dv_slice = 0;
  int dv_splits = 1;
  int threads = 0;
  int shared_bytes = 0;   // dynamic shared memory per CTA
  // TMA paths: a panel row of the head-dim tiles in shared memory, the tensor maps' swizzle
  // span (KernelPathInfo::panel_row_bytes).
  int panel_row_bytes = 128;
  // fa_fwd_qk100_v100_bf16_causal_m64n64w4s2_a16_sm80; "_varlen" ends a varlen variant's,
  // which is a kernel of its own so that fixed-length calls keep the registers that reading
  // sequence bounds would take.
  std::string kernel_name;
};

// Resolves `spec` for the path that serves `step` on `target` for a call with `call`'s
// traits (choose_path). Tiles come from the spec, else `tuned` (if non-null), else the path's
// heuristic — except when the call takes another path than the spec's primary one (a
// warp-specialised spec whose tensors TMA cannot load runs the sm80 kernel): the spec's and
// the tune DB's tiles are the primary path's, so that path's own heuristic serves. The
// spec's tiles are the forward's: other steps take `tuned` or their heuristic.
// Throws Error(Spec/Usage) if the spec cannot be served on the target.
Plan make_plan(const Spec& spec, const std::string& target, const CallTraits& call = {},
               const Tiles* tuned = nullptr, Step step = Step::Forward);

}  // namespace flashjit::gen
