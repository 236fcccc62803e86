#include "generator/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "generator/spec_rules.h"
#include "generator/tile_heuristic.h"

namespace flashjit::gen {

namespace {

struct TargetInfo {
  const char* name;
  int max_shared;  // opt-in dynamic shared memory per CTA, bytes
};
// sm_80 (A100): 163 KB; sm_86/sm_89 (consumer Ampere, Ada): 99 KB; sm_90a (H100/H200): 227 KB.
constexpr TargetInfo kTargets[] = {
    {"sm_80", 166912}, {"sm_86", 101376}, {"sm_89", 101376}, {"sm_90a", 232448}};

const TargetInfo& target_info(const std::string& target) {
  for (const auto& t : kTargets)
    if (target == t.name) return t;
  throw Error(ErrorKind::Usage,
              fmt::format("unknown target '{}'; flashjit targets sm_80, sm_86, sm_89, sm_90a", target));
}

std::string kernel_name(const Plan& p) {
  const Spec& s = p.spec;
  std::string target = p.target;
  target.erase(target.find('_'), 1);  // sm_90a -> sm90a
  const std::string mask = s.mask == MaskKind::SlidingWindow
                               ? fmt::format("_w{}_{}", s.window_left, s.window_right)
                               : mask_label(s);
  // The warp-specialised kernel has a fixed shape (m128, 12 warps): "ws" and its knobs.
  const std::string tiles =
      p.path == KernelPath::Sm90
          ? fmt::format("ws_n{}s{}", p.tiles.block_n, p.tiles.stages)
          : fmt::format("m{}n{}w{}s{}", p.tiles.block_m, p.tiles.block_n, p.tiles.warps,
                        p.tiles.stages);
  return fmt::format("fa_fwd_qk{}_v{}_{}_{}{}_{}_a{}_{}", s.head_dim_qk, s.head_dim_v,
                     to_string(s.dtype), s.causal ? "causal" : "full", mask, tiles,
                     p.align_bytes, target);
}

}  // namespace

bool is_known_target(const std::string& target) {
  for (const auto& t : kTargets)
    if (target == t.name) return true;
  return false;
}

std::string target_for_device(int cc_major, int cc_minor) {
  if (cc_major == 9 && cc_minor == 0) return "sm_90a";
  if (cc_major == 8 && cc_minor == 6) return "sm_86";
  if (cc_major == 8 && cc_minor == 9) return "sm_89";
  // An sm_80 cubin runs on every later 8.x GPU.
  if (cc_major == 8) return "sm_80";
  throw Error(ErrorKind::Usage,
              fmt::format("GPUs of compute capability {}.{} are not supported yet; flashjit "
                          "builds for 8.x (sm_80, sm_86, sm_89) and 9.0 (sm_90a)",
                          cc_major, cc_minor));
}

int max_shared_bytes(const std::string& target) { return target_info(target).max_shared; }

const char* to_string(KernelPath path) { return path == KernelPath::Sm90 ? "sm90" : "sm80"; }

bool sm90_serves(const Spec& spec, const std::string& target, bool tma_loadable) {
  const bool mask_supported = sm90_serves_mask(spec);
  return target == "sm_90a" && spec.warp_specialization && spec.arch != Arch::Sm80 &&
         mask_supported && tma_loadable;
}

Plan make_plan(const Spec& spec, const std::string& target, int align_bytes, const Tiles* tuned,
               bool tma_loadable) {
  spec.validate();
  target_info(target);
  if (spec.arch == Arch::Sm90a && target != "sm_90a")
    throw Error(ErrorKind::Usage,
                fmt::format("the spec asks for arch sm90a but the target is {}", target));
  if (align_bytes != 16 && align_bytes != 8 && align_bytes != 4 && align_bytes != 2)
    throw Error(ErrorKind::Usage, fmt::format("alignment {} is not 16, 8, 4 or 2", align_bytes));

  Plan plan;
  plan.spec = spec;
  plan.target = target;
  plan.align_bytes = align_bytes;
  const PaddedDims dims = padded_dims(spec);
  plan.d_qk_pad = dims.d_qk_pad;
  plan.d_v_pad = dims.d_v_pad;
  plan.dv_splits = dims.dv_splits;
  plan.dv_slice = dims.dv_slice;
  plan.path = sm90_serves(spec, target, tma_loadable) ? KernelPath::Sm90 : KernelPath::Sm80;
  // A warp-specialised spec whose call cannot use TMA runs the sm80 kernel with its own
  // heuristic tiles: the spec's and the tune DB's tiles are the sm90 kernel's.
  const bool fallback = plan.path == KernelPath::Sm80 && sm90_serves(spec, target);
  plan.tiles = fallback                ? sm80_default_tiles(spec, target)
               : !spec.tiles.is_auto() ? spec.tiles
               : tuned                 ? *tuned
                                       : default_tiles(spec, target);
  const std::string problem = tiles_problem(spec, target, plan.tiles, plan.path);
  if (!problem.empty())
    throw Error(ErrorKind::Usage,
                fmt::format("tiles {{block_m: {}, block_n: {}, warps: {}, stages: {}}} cannot run "
                            "head dims {}/{} with the {} kernel on {}: {}",
                            plan.tiles.block_m, plan.tiles.block_n, plan.tiles.warps,
                            plan.tiles.stages, spec.head_dim_qk, spec.head_dim_v,
                            to_string(plan.path), target, problem));
  plan.threads = plan.tiles.warps * 32;
  plan.shared_bytes =
      plan.path == KernelPath::Sm90
          ? sm90_shared_bytes(plan.d_qk_pad, plan.dv_slice, plan.tiles)
          : sm80_shared_bytes(plan.d_qk_pad, plan.dv_slice, plan.tiles);
  plan.kernel_name = kernel_name(plan);
  return plan;
}

Plan varlen_variant(Plan plan) {
  plan.varlen = true;
  plan.kernel_name += "_varlen";
  return plan;
}

namespace {

// Every row start is base + b*batch + s*seq + h*head (elements of 2 bytes): its alignment
// is the common power of two of the base and of the strides of dimensions with extent > 1.
uint64_t row_start_bits(const void* base, const TensorStrides& st, int batch, int seqlen,
                        int heads) {
  uint64_t bits = reinterpret_cast<uint64_t>(base);
  if (batch > 1) bits |= static_cast<uint64_t>(st.batch) * 2;
  if (seqlen > 1) bits |= static_cast<uint64_t>(st.seq) * 2;
  if (heads > 1) bits |= static_cast<uint64_t>(st.head) * 2;
  return bits;
}

uint64_t qkv_bits(const ForwardArgs& a) {
  return row_start_bits(a.q, a.q_stride, a.batch, a.seqlen_q, a.heads_q) |
         row_start_bits(a.k, a.k_stride, a.batch, a.seqlen_k, a.heads_kv) |
         row_start_bits(a.v, a.v_stride, a.batch, a.seqlen_k, a.heads_kv);
}

int alignment_of(uint64_t bits) {
  bits |= 16;
  return static_cast<int>(bits & (~bits + 1));  // lowest set bit, at most 16
}

}  // namespace

int qkv_alignment(const ForwardArgs& a) { return alignment_of(qkv_bits(a)); }

int forward_alignment(const ForwardArgs& a) {
  return alignment_of(qkv_bits(a) |
                      row_start_bits(a.o, a.o_stride, a.batch, a.seqlen_q, a.heads_q));
}

LaunchGeometry launch_geometry(const Plan& plan, const ForwardArgs& args, int sm_count) {
  LaunchGeometry g;
  g.grid_x = static_cast<unsigned>((args.seqlen_q + plan.tiles.block_m - 1) / plan.tiles.block_m);
  g.grid_y = static_cast<unsigned>(args.heads_q);
  g.grid_z = static_cast<unsigned>(args.batch * plan.dv_splits);
  if (plan.path == KernelPath::Sm90) {
    // Persistent: one CTA a multiprocessor (its 384 threads hold the whole register file),
    // each drawing tiles until the grid's are done.
    const long long tiles = 1LL * g.grid_x * g.grid_y * g.grid_z;
    g.grid_x = static_cast<unsigned>(std::min<long long>(tiles, std::max(sm_count, 1)));
    g.grid_y = g.grid_z = 1;
  }
  g.block_x = static_cast<unsigned>(plan.threads);
  g.shared_bytes = static_cast<unsigned>(plan.shared_bytes);
  return g;
}

}  // namespace flashjit::gen
