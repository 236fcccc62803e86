// A Plan is a Spec resolved for one compile target, one tile configuration and one global
// memory alignment: everything the emitter bakes into the source as a constant.
#pragma once

#include <string>

#include "flashjit/flashjit.h"

namespace flashjit::gen {

// Compile targets flashjit knows ("sm_80", "sm_86", "sm_89", "sm_90a").
bool is_known_target(const std::string& target);
// The target for a device of compute capability major.minor (9.0 -> "sm_90a").
std::string target_for_device(int cc_major, int cc_minor);
// Max dynamic shared memory per CTA on a target (opt-in limit).
int max_shared_bytes(const std::string& target);

// The kernel a plan generates: the FlashAttention-2 mma.sync kernel (every target) or the
// warp-specialised TMA + wgmma kernel (sm_90a, 16-byte aligned tensors).
enum class KernelPath { Sm80, Sm90 };
const char* to_string(KernelPath path);  // "sm80" | "sm90"

// Does the sm90 kernel serve `spec` on `target` for a call whose Q, K and V TMA can load
// (`tma_loadable`, see runtime/tensor_maps.h)? It needs sm_90a, hopper.warp_specialization
// and a mask it serves (sm90_serves_mask); `arch: sm80` keeps the mma.sync kernel.
bool sm90_serves(const Spec& spec, const std::string& target, bool tma_loadable = true);

struct Plan {
  Spec spec;
  KernelPath path = KernelPath::Sm80;
  std::string target;  // "sm_80" ...
  Tiles tiles;         // resolved, never auto
  int d_qk_pad = 0;    // head_dim_qk rounded up to the MMA k granularity (16)
  int d_v_pad = 0;     // head_dim_v rounded up to 16
  int dv_slice = 0;    // V columns one CTA computes (padded); dv_splits CTAs share a row block
  int dv_splits = 1;
  int align_bytes = 16;  // every row start of Q/K/V/O is a multiple of this (16, 8, 4 or 2)
  int threads = 0;
  int shared_bytes = 0;   // dynamic shared memory per CTA
  std::string kernel_name;  // fa_fwd_qk100_v100_bf16_causal_m64n64w4s2_a16_sm80
  // Packed variable-length batches (ForwardArgs::cu_seqlens_*): a kernel variant of its own,
  // so fixed-length calls keep the registers that reading sequence bounds would take.
  bool varlen = false;
};

// Resolves `spec` for `target`. `align_bytes` comes from the call's pointers and strides
// (see forward_alignment), `tma_loadable` says whether TMA can load its Q, K and V; with
// it the kernel path (sm90_serves). Tiles come from the spec, else `tuned` (if non-null),
// else the built-in heuristic — except when a warp-specialised spec falls back to the sm80
// kernel for tensors TMA cannot load: that variant uses the sm80 heuristic.
// Throws Error(Spec/Usage) if the spec cannot be served on the target.
Plan make_plan(const Spec& spec, const std::string& target, int align_bytes = 16,
               const Tiles* tuned = nullptr, bool tma_loadable = true);

// `plan` for variable-length batches: varlen set, "_varlen" appended to the kernel name. The
// sm90 kernel serves them when TMA can load the packed tensors (tma_loadable: their row
// counts are given).
Plan varlen_variant(Plan plan);

// The built-in tile heuristic of the kernel path `spec` takes on `target` for 16-byte
// aligned tensors.
Tiles default_tiles(const Spec& spec, const std::string& target);
// Why `tiles` cannot run `spec` on `target` with the kernel of `path` ("" when they can):
// that kernel's tile rules, shared memory and registers, and the spec's block mask.
std::string tiles_problem(const Spec& spec, const std::string& target, const Tiles& tiles,
                          KernelPath path);
// The same with the kernel that serves 16-byte aligned tensors.
std::string tiles_problem(const Spec& spec, const std::string& target, const Tiles& tiles);

// Largest of 16/8/4/2 that divides every row start of Q, K, V and O for these arguments.
int forward_alignment(const ForwardArgs& args);
// The same for Q, K and V only (what the kernels load).
int qkv_alignment(const ForwardArgs& args);

struct LaunchGeometry {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1;
  unsigned shared_bytes = 0;
};
// The grid of one call. The sm90 kernel's grid is persistent: `sm_count` CTAs at most.
LaunchGeometry launch_geometry(const Plan& plan, const ForwardArgs& args, int sm_count);

}  // namespace flashjit::gen
