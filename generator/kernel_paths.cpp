#include <fmt/format.h>

#include "generator/bwd_dkdv_sm80_path.h"
#include "generator/bwd_dkdv_sm90_path.h"
#include "generator/bwd_dq_convert_path.h"
#include "generator/bwd_dq_sm80_path.h"
#include "generator/bwd_dq_sm90_path.h"
#include "generator/bwd_pre_path.h"
#include "generator/dec_combine_path.h"
#include "generator/dec_sm80_path.h"
#include "generator/fwd_sm80_path.h"
#include "generator/fwd_sm90_path.h"
#include "generator/kernel_path.h"
#include "generator/merge_path.h"
#include "generator/plan.h"
#include "generator/targets.h"

namespace flashjit::gen {
namespace {

// In the order of preference: a call takes the first path that serves it.
constexpr const KernelPathInfo* kPaths[] = {
    &kFwdSm90Path,       &kFwdSm80Path,
    &kBwdPrePath,        &kBwdDkDvDqSm90Path, &kBwdDkDvDqOrderedSm90Path, &kBwdDkDvPairedSm90Path,
    &kBwdDkDvSm90Path,   &kBwdDkDvSm80Path,   &kBwdDqConvertPath,         &kBwdDqSm90Path,
    &kBwdDqPairedSm90Path, &kBwdDqSm80Path,   &kDecSm80Path,              &kDecCombinePath,
    &kMergePath};

}  // namespace

const char* to_string(Operation operation) {
  switch (operation) {
    case Operation::Forward: return "forward";
    case Operation::Backward: return "backward";
    case Operation::Decode: return "decode";
    case Operation::Merge: return "merge";
  }
  return "unknown";
}

const char* to_string(Step step) {
  switch (step) {
    case Step::Forward: return "forward";
    case Step::BwdPre: return "bwd_pre";
    case Step::BwdDkDv: return "bwd_dkdv";
    case Step::BwdDq: return "bwd_dq";
    case Step::DecSplit: return "dec_split";
    case Step::DecCombine: return "dec_combine";
    case Step::Merge: return "merge";
  }
  return "unknown";
}

Operation operation_of(Step step) {
  switch (step) {
    case Step::Forward: return Operation::Forward;
    case Step::BwdPre:
    case Step::BwdDkDv:
    case Step::BwdDq: return Operation::Backward;
    case Step::DecSplit:
    case Step::DecCombine: return Operation::Decode;
    case Step::Merge: return Operation::Merge;
  }
  return Operation::Forward;
}

bool serves_every_target(const Spec&, const std::string& target, const CallTraits&) {
  return is_known_target(target);
}

std::string no_tuning_problem(const PaddedDims&, const Tiles&) { return ""; }

std::string no_extra_source(const Plan&) { return ""; }

std::vector<Tiles> no_tuning_grid(const Spec&) { return {}; }

int no_shared_memory(const PaddedDims&, const Tiles&) { return 0; }

ColumnSplit whole_columns(const PaddedDims& dims) {
  return {.dk_slice = dims.d_qk_pad, .dv_slice = dims.d_v_pad, .splits = 1};
}

Tiles warp_a_row_tiles(const Spec&, const std::string&, const CallTraits&) {
  return {.block_m = 4, .warps = 4};
}

std::string warp_a_row_problem(const PaddedDims&, const Tiles& t, const std::string&) {
  if (t.warps < 1 || t.block_m != t.warps)
    return fmt::format("block_m {} must equal warps {}: a warp a row", t.block_m, t.warps);
  return "";
}

std::string warps_label(const Tiles& t) { return fmt::format("w{}", t.warps); }

namespace {

constexpr int kRegistersPerSm = 65536, kMaxRegistersPerThread = 255;

// Rows of a narrow alignment (packed tensors of head dims no multiple of 8) take several copies
// a row, whose addresses push some kernels a few registers past a count ptxas aims at for
// occupancy when told none (72, 80, 96, 128 or 168 for 128 threads), and it spills 4-8 bytes
// to stay there (NVRTC 13.0: decode at d1-5, d20, d59, d68, the sm80 dQ kernel at d20-59, sm_80
// to sm_90a; bench/NOTES.md entry 40). The most CTAs that still leave a thread 255 registers,
// named in the launch bounds, stop that.
int narrow_rows_ctas(const Plan& plan) {
  if (plan.call.align_bytes >= 16) return 0;
  return std::max(1, kRegistersPerSm / (plan.threads * kMaxRegistersPerThread));
}

}  // namespace

std::string struct_entry(const Plan& plan, const char* params_type, const char* function,
                         int min_ctas) {
  if (min_ctas == 0) min_ctas = narrow_rows_ctas(plan);
  const std::string bounds = min_ctas > 0 ? fmt::format("{}, {}", plan.threads, min_ctas)
                                          : std::to_string(plan.threads);
  return fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}) {}(const {} params) {{\n"
      "  {}<KernelConfig>(params);\n"
      "}}\n",
      bounds, plan.kernel_name, params_type, function);
}

int full_register_ctas(const Plan& plan) {
  const int ctas = resident_ctas(plan.target, plan.shared_bytes, plan.threads);
  return ctas * plan.threads * kMaxRegistersPerThread <= kRegistersPerSm ? ctas : 0;
}

bool some_tiles_fit(std::span<const Tiles> preferred, const PaddedDims& dims,
                    const std::string& target,
                    std::string (*problem)(const PaddedDims&, const Tiles&, const std::string&)) {
  for (const Tiles& t : preferred)
    if (problem(dims, t, target).empty()) return true;
  return false;
}

Tiles first_fitting_tiles(std::span<const Tiles> preferred, const Spec& spec,
                          const std::string& target,
                          std::string (*problem)(const PaddedDims&, const Tiles&,
                                                 const std::string&),
                          const char* kernel) {
  const PaddedDims dims = padded_dims(spec);
  for (const Tiles& t : preferred)
    if (problem(dims, t, target).empty() && mask_tiles_problem(spec, t).empty()) return t;
  throw Error(ErrorKind::Usage,
              fmt::format("no {} tile configuration fits head dims {}/{} on {}", kernel,
                          spec.head_dim_qk, spec.head_dim_v, target));
}

std::span<const KernelPathInfo* const> kernel_paths() { return kPaths; }

const KernelPathInfo& kernel_path(KernelPath id) {
  for (const KernelPathInfo* path : kPaths)
    if (path->id == id) return *path;
  throw Error(ErrorKind::Usage, "kernel path not in the registry (generator/kernel_paths.cpp)");
}

const char* to_string(KernelPath id) { return kernel_path(id).label; }

const KernelPathInfo& choose_path(Step step, const Spec& spec, const std::string& target,
                                  const CallTraits& call) {
  require_known_target(target);
  for (const KernelPathInfo* path : kPaths)
    if (path->step == step && path->serves(spec, target, call)) return *path;
  throw Error(ErrorKind::Usage,
              fmt::format("spec {}: no kernel path of flashjit serves the {} ({}) on {} yet",
                          spec.name, to_string(operation_of(step)), to_string(step), target));
}

Tiles default_tiles(const Spec& spec, const std::string& target, Step step,
                    const CallTraits& call) {
  return choose_path(step, spec, target).default_tiles(spec, target, call);
}

std::string tiles_problem(const Spec& spec, const std::string& target, const Tiles& tiles,
                          const KernelPathInfo& path) {
  const std::string problem = path.tiles_problem(padded_dims(spec), tiles, target);
  if (!problem.empty() || !path.tiles_in_mask_blocks) return problem;
  return mask_tiles_problem(spec, tiles);
}

std::string tiles_problem(const Spec& spec, const std::string& target, const Tiles& tiles,
                          Step step) {
  return tiles_problem(spec, target, tiles, choose_path(step, spec, target));
}

}  // namespace flashjit::gen
