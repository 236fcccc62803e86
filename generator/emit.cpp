#include "generator/emit.h"

#include <fmt/format.h>

#include <set>
#include <sstream>

#include "generator/templates.h"
#include "generator/wgmma_emit.h"

namespace flashjit::gen {

namespace {

// C++ spelling of each element type in the templates (a fixed table: spec values never
// reach the source as text).
const char* element_type(DType dtype) {
  switch (dtype) {
    case DType::F16: return "fj::Fp16";
    case DType::BF16: return "fj::Bf16";
  }
  throw Error(ErrorKind::Usage, "unknown dtype");
}

// The templates' spelling of each pattern (fj::Pattern in templates/attn/mask.cuh).
const char* pattern_constant(PatternKind kind) {
  switch (kind) {
    case PatternKind::None: return "fj::Pattern::kNone";
    case PatternKind::Local: return "fj::Pattern::kLocal";
    case PatternKind::Strided: return "fj::Pattern::kStrided";
    case PatternKind::GlobalLocal: return "fj::Pattern::kGlobalLocal";
  }
  throw Error(ErrorKind::Usage, "unknown pattern kind");
}

// Appends template `name` to `out`, replacing each `#include "x.cuh"` by x's text (once per
// file, as #pragma once would) so that the program NVRTC sees needs no include path.
void inline_template(const std::string& name, std::set<std::string>& done, std::string& out) {
  if (!done.insert(name).second) return;
  std::istringstream lines{std::string(template_text(name))};
  out += fmt::format("// ---- templates/{}\n", name);
  for (std::string line; std::getline(lines, line);) {
    const auto inc = line.find("#include \"");
    if (inc != std::string::npos && line.find_first_not_of(' ') == inc) {
      const auto begin = inc + 10;
      const std::string path = line.substr(begin, line.find('"', begin) - begin);
      inline_template(included_template_name(name, path), done, out);
      continue;
    }
    if (line == "#pragma once") continue;
    out += line;
    out += '\n';
  }
}

// The KernelConfig both kernels read: the spec's and the plan's numbers as constexprs.
std::string kernel_config(const Plan& plan) {
  const Spec& s = plan.spec;
  return fmt::format(
      "struct KernelConfig {{\n"
      "  using Element = {};\n"
      "  static constexpr int kHeadDimQk = {};\n"
      "  static constexpr int kHeadDimV = {};\n"
      "  static constexpr int kDqkPad = {};\n"
      "  static constexpr int kDvSlice = {};\n"
      "  static constexpr int kDvSplits = {};\n"
      "  static constexpr int kBlockM = {};\n"
      "  static constexpr int kBlockN = {};\n"
      "  static constexpr int kWarps = {};\n"
      "  static constexpr int kStages = {};\n"
      "  static constexpr int kAlign = {};\n"
      "  static constexpr bool kCausal = {};\n"
      "  static constexpr bool kWindow = {};\n"
      "  static constexpr int kWindowLeft = {};\n"
      "  static constexpr int kWindowRight = {};\n"
      "  static constexpr bool kBlockSparse = {};\n"
      "  static constexpr fj::Pattern kPattern = {};\n"
      "  static constexpr int kMaskBlockQ = {};\n"
      "  static constexpr int kMaskBlockK = {};\n"
      "  static constexpr int kPatternWindow = {};\n"
      "  static constexpr int kPatternStride = {};\n"
      "  static constexpr int kPatternGlobal = {};\n"
      "  static constexpr bool kVarlen = {};\n"
      "}};\n",
      element_type(s.dtype), s.head_dim_qk, s.head_dim_v, plan.d_qk_pad, plan.dv_slice,
      plan.dv_splits, plan.tiles.block_m, plan.tiles.block_n, plan.tiles.warps, plan.tiles.stages,
      plan.align_bytes, s.causal ? "true" : "false",
      s.mask == MaskKind::SlidingWindow ? "true" : "false", s.window_left, s.window_right,
      s.mask == MaskKind::BlockSparse ? "true" : "false", pattern_constant(s.pattern), s.block_q,
      s.block_k, s.pattern_window, s.pattern_stride, s.pattern_global,
      plan.varlen ? "true" : "false");
}

// The host/device agreement checks and the extern "C" entry of each path.
std::string kernel_entry(const Plan& plan) {
  const bool sm90 = plan.path == KernelPath::Sm90;
  std::string out = fmt::format(
      "using KernelLayout = fj::{}<KernelConfig>;\n"
      "static_assert(KernelLayout::kSharedBytes == {}, \"host and device disagree on shared memory\");\n"
      "static_assert(KernelLayout::kThreads == {}, \"host and device disagree on the block size\");\n\n",
      sm90 ? "Sm90FwdLayout" : "Sm80FwdLayout", plan.shared_bytes, plan.threads);
  if (sm90)
    return out + fmt::format(
        "// One CTA a multiprocessor: 384 threads, and setmaxnreg needs the bound to hold.\n"
        "extern \"C\" __global__ void __launch_bounds__({}, 1) {}(\n"
        "    const FwdParams params, const __grid_constant__ fj::TmaDesc tm_q,\n"
        "    const __grid_constant__ fj::TmaDesc tm_k, const __grid_constant__ fj::TmaDesc tm_v) {{\n"
        "  fj::fwd_sm90<KernelConfig>(params, &tm_q, &tm_k, &tm_v);\n"
        "}}\n",
        plan.threads, plan.kernel_name);
  return out + fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}) {}(const FwdParams params) {{\n"
      "  fj::fwd_sm80<KernelConfig>(params);\n"
      "}}\n",
      plan.threads, plan.kernel_name);
}

}  // namespace

std::string emit_source(const Plan& plan) {
  const Spec& s = plan.spec;
  std::string src = fmt::format(
      "// Generated by flashjit {} for {} ({} kernel). Do not edit: regenerate from the spec.\n"
      "// head_dim_qk {} head_dim_v {} dtype {} causal {} mask {} tiles m{} n{} w{} s{} align {}\n\n",
      version(), plan.target, to_string(plan.path), s.head_dim_qk, s.head_dim_v,
      to_string(s.dtype), s.causal ? "true" : "false", to_string(s.mask), plan.tiles.block_m,
      plan.tiles.block_n, plan.tiles.warps, plan.tiles.stages, plan.align_bytes);
  std::set<std::string> done;
  if (plan.path == KernelPath::Sm90) {
    inline_template("kernels/fwd_sm90.cuh", done, src);
    src += "\n// ---- the wgmma shapes this kernel uses\nnamespace fj {\n";
    src += emit_wgmma(s.dtype, plan.tiles.block_n);
    if (plan.dv_slice != plan.tiles.block_n) src += emit_wgmma(s.dtype, plan.dv_slice);
    src += "}  // namespace fj\n";
  } else {
    inline_template("kernels/fwd_sm80.cuh", done, src);
  }
  src += "\n// ---- the kernel this program exists for\n";
  src += kernel_config(plan);
  src += kernel_entry(plan);
  return src;
}

}  // namespace flashjit::gen
