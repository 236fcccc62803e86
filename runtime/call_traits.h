// What a call's pointers, strides and sizes decide about the kernel that serves it (its
// CallTraits: alignment, whether TMA can load it, varlen) and how it is launched (the grid).
// Call-time logic lives here, in the runtime; the generator only takes the traits.
#pragma once

#include "flashjit/flashjit.h"
#include "generator/plan.h"

namespace flashjit::rt {

// Largest of 16/8/4/2 that divides every row start of Q, K, V and O for these arguments.
int forward_alignment(const Spec& spec, const ForwardArgs& args);

// Can the TMA kernels serve this call's Q, K and V: is each tensor addressable by TMA where
// it lies (16-byte aligned base and strides), or stageable into padded rows by one 3-d copy
// (runtime/staging.h: head dims that are not a multiple of 8 with packed heads)? A varlen
// call also needs its packed row counts (ForwardArgs total_q / total_k > 0).
bool tma_loadable(const Spec& spec, const ForwardArgs& args);

gen::CallTraits forward_call_traits(const Spec& spec, const ForwardArgs& args);
// A decode call's: its alignment and whether its cache is paged (decode loads through no
// tensor map).
gen::CallTraits decode_call_traits(const Spec& spec, const ForwardArgs& args);

// Largest of 16/8/4/2 that divides every row start of Q, K, V, O, dO, dQ, dK and dV.
int backward_alignment(const Spec& spec, const BackwardArgs& args);
// Can the TMA kernels serve the backward's Q, K, V and dO (tma_loadable's rules, dO too)?
bool backward_tma_loadable(const Spec& spec, const BackwardArgs& args);
gen::CallTraits backward_call_traits(const Spec& spec, const BackwardArgs& args);

struct LaunchGeometry {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1;
  unsigned shared_bytes = 0;
};
// The grid of one call: blocks of rows (the path's GridOver) of every head, times batch and
// column splits (and decode's `kv_splits`). A persistent path's grid holds `sm_count` CTAs
// at most.
LaunchGeometry launch_geometry(const gen::Plan& plan, const ForwardArgs& args, int sm_count,
                               int kv_splits = 1);

}  // namespace flashjit::rt
