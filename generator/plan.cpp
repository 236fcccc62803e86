#include "generator/plan.h"

#include <fmt/format.h>

#include "generator/spec_rules.h"

namespace flashjit::gen {
namespace {

std::string kernel_name(const Plan& p) {
  const Spec& s = p.spec;
  std::string target = p.target;
  target.erase(target.find('_'), 1);  // sm_90a -> sm90a
  const std::string mask = s.mask == MaskKind::SlidingWindow
                               ? fmt::format("_w{}_{}", s.window_left, s.window_right)
                               : mask_label(s);
  return fmt::format("{}_qk{}_v{}_{}_{}{}_{}_a{}_{}{}{}", p.path->kernel_prefix, s.head_dim_qk,
                     s.head_dim_v,
                     to_string(s.dtype), s.causal ? "causal" : "full", mask,
                     p.path->tiles_label(p.tiles), p.call.align_bytes, target,
                     p.call.varlen ? "_varlen" : "", p.call.paged ? "_paged" : "");
}

}  // namespace

Plan make_plan(const Spec& spec, const std::string& target, const CallTraits& call,
               const Tiles* tuned, Step step) {
  spec.validate();
  require_known_target(target);
  if (spec.arch == Arch::Sm90a && target != "sm_90a")
    throw Error(ErrorKind::Usage,
                fmt::format("the spec asks for arch sm90a but the target is {}", target));
  const int align = call.align_bytes;
  if (align != 16 && align != 8 && align != 4 && align != 2)
    throw Error(ErrorKind::Usage, fmt::format("alignment {} is not 16, 8, 4 or 2", align));

  Plan plan;
  plan.spec = spec;
  plan.target = target;
  plan.call = call;
  const PaddedDims dims = padded_dims(spec);
  plan.d_qk_pad = dims.d_qk_pad;
  plan.d_v_pad = dims.d_v_pad;
  plan.path = &choose_path(step, spec, target, call);
  const ColumnSplit split = plan.path->column_split(dims);
  plan.dk_slice = split.dk_slice;
  plan.dv_slice = split.dv_slice;
  plan.dv_splits = split.splits;
  const bool primary = plan.path == &choose_path(step, spec, target);
  const bool spec_tiles = step == Step::Forward && !spec.tiles.is_auto();
  plan.tiles = !primary     ? plan.path->default_tiles(spec, target, call)
               : spec_tiles ? spec.tiles
               : tuned      ? *tuned
                            : plan.path->default_tiles(spec, target, call);
  const std::string problem = tiles_problem(spec, target, plan.tiles, *plan.path);
  if (!problem.empty())
    throw Error(ErrorKind::Usage,
                fmt::format("tiles {{block_m: {}, block_n: {}, warps: {}, stages: {}}} cannot run "
                            "head dims {}/{} with the {} kernel on {}: {}",
                            plan.tiles.block_m, plan.tiles.block_n, plan.tiles.warps,
                            plan.tiles.stages, spec.head_dim_qk, spec.head_dim_v,
                            plan.path->label, target, problem));
  plan.threads = plan.tiles.warps * 32;
  plan.shared_bytes = plan.path->shared_bytes(dims, plan.tiles);
  if (plan.path->panel_row_bytes != nullptr)
    plan.panel_row_bytes = plan.path->panel_row_bytes(dims, plan.tiles);
  plan.kernel_name = kernel_name(plan);
  return plan;
}

}  // namespace flashjit::gen
