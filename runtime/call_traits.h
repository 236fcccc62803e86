// What a call's pointers, strides and sizes decide about the kernel that serves it (its
// CallTraits: alignment, whether TMA can load it, varlen) and how it is launched (the grid).
// Call-time logic lives here, in the runtime; the generator only takes the traits.
#pragma once

#include "flashjit/flashjit.h"
#include "generator/plan.h"

namespace flashjit::rt {

// Largest of 16/8/4/2 that divides every row start of Q, K, V and O for these arguments.
int forward_alignment(const Spec& spec, const ForwardArgs& args);
// The same for Q, K and V only (what the kernels load).
int qkv_alignment(const Spec& spec, const ForwardArgs& args);

// Can TMA load this call's Q, K and V? Base addresses and the sequence, head and batch
// strides (along dimensions of extent > 1) must be multiples of 16 bytes. A head is a
// dimension of its own, not a column offset: a box whose first column is not 16-byte
// aligned faults on Hopper (CUDA_ERROR_ILLEGAL_INSTRUCTION, seen on the H200 with heads of
// 200 bytes laid end to end), so head dim 100 with packed heads runs the sm80 kernel.
// A varlen call also needs its packed row counts (ForwardArgs total_q / total_k > 0).
bool tma_loadable(const Spec& spec, const ForwardArgs& args);

gen::CallTraits forward_call_traits(const Spec& spec, const ForwardArgs& args);
// A decode call's: its alignment and whether its cache is paged (decode loads through no
// tensor map).
gen::CallTraits decode_call_traits(const Spec& spec, const ForwardArgs& args);

// Largest of 16/8/4/2 that divides every row start of Q, K, V, O, dO, dQ, dK and dV.
int backward_alignment(const Spec& spec, const BackwardArgs& args);
// Can TMA load the backward's Q, K, V and dO (tma_loadable's rules, and dO's rows too)?
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
