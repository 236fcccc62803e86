// Spec validation: the value ranges every spec must satisfy, however it was built.
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "flashjit/flashjit.h"
#include "generator/spec_fields.h"
#include "generator/spec_rules.h"
#include "generator/tile_rules.h"

namespace flashjit::gen {
namespace {

// The bounds of single integers are the table's (spec_fields.cpp); these rules are the rest.
constexpr int kMaxNameLength = 64;
constexpr int kMmaRows = 16;  // rows of one mma.sync m16n8k16 tile: the unit of block_m/block_n
constexpr std::array kWarpCounts = {1, 2, 4, 8, 12, 16};
constexpr int kWarpSpecializedWarps = 12;  // the sm90 kernel: producer + two consumer warp groups
constexpr int kWarpGroupRows = 64;         // query rows of one consumer warp group (wgmma M)

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

SpecProblem problem(std::string_view field, std::string what) {
  return {std::string(field), std::move(what), std::string(allowed_values(field))};
}

std::optional<SpecProblem> name_problem(const std::string& name) {
  // An empty name means "not given": it resolves to default_spec_name().
  if (name.empty()) return std::nullopt;
  if (name.size() > kMaxNameLength)
    return problem("name", fmt::format("'{}' has {} characters", name, name.size()));
  auto bad = std::find_if_not(name.begin(), name.end(), is_name_char);
  if (bad != name.end())
    return problem("name", fmt::format("'{}' contains the character '{}'", name, *bad));
  return std::nullopt;
}

// The table's bounds for the integer row at `field` (it has them), applied to `value`.
std::optional<SpecProblem> range_problem(std::string_view field, int value) {
  const IntRange& r = *find_spec_field(field)->range;
  if (r.step > 1) {
    if (value < r.min || value > r.max || value % r.step != 0)
      return problem(field, fmt::format("{} is not a multiple of {} in {}..{}", value, r.step,
                                        r.min, r.max));
  } else if (r.count) {
    if (value < r.min)
      return problem(field, r.min == 0 ? fmt::format("{} is negative", value)
                                       : fmt::format("{} is below {}", value, r.min));
    if (value > r.max) return problem(field, fmt::format("{} is above {}", value, r.max));
  } else if (value < r.min || value > r.max) {
    return problem(field, fmt::format("{} is out of range", value));
  }
  return std::nullopt;
}

// Enum values outside the declared set only arise from casts in C++; caught here so that
// nothing downstream indexes a table with them.
std::optional<SpecProblem> enum_problem(const Spec& spec) {
  if (spec.dtype != DType::F16 && spec.dtype != DType::BF16)
    return problem("dtype", fmt::format("{} is not a DType", static_cast<int>(spec.dtype)));
  if (spec.arch != Arch::Auto && spec.arch != Arch::Sm80 && spec.arch != Arch::Sm90a)
    return problem("arch", fmt::format("{} is not an Arch", static_cast<int>(spec.arch)));
  if (spec.decode != DecodeMode::Auto && spec.decode != DecodeMode::Always &&
      spec.decode != DecodeMode::Never)
    return problem("decode", fmt::format("{} is not a DecodeMode", static_cast<int>(spec.decode)));
  if (spec.mask != MaskKind::None && spec.mask != MaskKind::SlidingWindow &&
      spec.mask != MaskKind::BlockSparse && spec.mask != MaskKind::Pattern)
    return problem("mask", fmt::format("{} is not a MaskKind", static_cast<int>(spec.mask)));
  if (spec.pattern != PatternKind::None && spec.pattern != PatternKind::Local &&
      spec.pattern != PatternKind::Strided && spec.pattern != PatternKind::GlobalLocal)
    return problem("mask.pattern.kind",
                   fmt::format("{} is not a PatternKind", static_cast<int>(spec.pattern)));
  return std::nullopt;
}

// The fields of block_sparse and pattern masks: set exactly for their own mask kind.
std::optional<SpecProblem> block_mask_problem(const Spec& spec) {
  const bool sparse = spec.mask == MaskKind::BlockSparse;
  const bool pattern = spec.mask == MaskKind::Pattern;
  if (!sparse && !pattern) {
    if (spec.block_q != 0 || spec.block_k != 0 || spec.pattern != PatternKind::None ||
        spec.pattern_window != 0 || spec.pattern_stride != 0 || spec.pattern_global != 0)
      return problem("mask", fmt::format("block_q/block_k/pattern fields are set but the mask is "
                                         "{}", to_string(spec.mask)));
    return std::nullopt;
  }
  if (sparse) {
    if (spec.pattern != PatternKind::None || spec.pattern_window != 0 ||
        spec.pattern_stride != 0 || spec.pattern_global != 0)
      return problem("mask", "pattern fields are set but the mask is block_sparse");
    if (auto p = range_problem("mask.block_sparse.block_q", spec.block_q)) return p;
    return range_problem("mask.block_sparse.block_k", spec.block_k);
  }
  if (spec.pattern == PatternKind::None)
    return problem("mask.pattern.kind", "missing: a pattern mask needs its kind");
  if (auto p = range_problem("mask.pattern.block", spec.block_q)) return p;
  if (spec.block_k != spec.block_q)
    return problem("mask.pattern.block",
                   fmt::format("block_q {} and block_k {} differ; a pattern has one block size",
                               spec.block_q, spec.block_k));
  // Each kind reads its own parameters; a parameter of another kind is a mistake.
  const bool local = spec.pattern == PatternKind::Local;
  const bool strided = spec.pattern == PatternKind::Strided;
  const bool global_local = spec.pattern == PatternKind::GlobalLocal;
  if (strided && spec.pattern_window != 0)
    return problem("mask.pattern.kind", "pattern_window is set but the kind is strided");
  if (!strided && spec.pattern_stride != 0)
    return problem("mask.pattern.kind", fmt::format("pattern_stride is set but the kind is {}",
                                                    to_string(spec.pattern)));
  if (!global_local && spec.pattern_global != 0)
    return problem("mask.pattern.kind", fmt::format("pattern_global is set but the kind is {}",
                                                    to_string(spec.pattern)));
  if (local) return range_problem("mask.pattern.blocks", spec.pattern_window);
  if (strided) return range_problem("mask.pattern.stride", spec.pattern_stride);
  if (spec.pattern_global < 1)  // global_local from here
    return problem("mask.pattern.global_blocks",
                   fmt::format("{} is below 1 (without global blocks use kind: local)",
                               spec.pattern_global));
  if (auto p = range_problem("mask.pattern.global_blocks", spec.pattern_global)) return p;
  return range_problem("mask.pattern.window_blocks", spec.pattern_window);
}

std::optional<SpecProblem> window_problem(const Spec& spec) {
  if (spec.mask != MaskKind::SlidingWindow) {
    if (spec.window_left != 0 || spec.window_right != 0)
      return problem("mask", fmt::format("window_left/window_right ({}, {}) are set but the mask "
                                         "is {}", spec.window_left, spec.window_right,
                                         to_string(spec.mask)));
    return std::nullopt;
  }
  if (auto p = range_problem("mask.sliding_window.left", spec.window_left)) return p;
  if (auto p = range_problem("mask.sliding_window.right", spec.window_right)) return p;
  if (spec.causal && spec.window_right != 0)
    return problem("mask.sliding_window.right",
                   fmt::format("{} with causal: true, which hides every key right of the "
                               "diagonal", spec.window_right));
  return std::nullopt;
}

// Given tiles must fit the block mask (tile_rules.h says why); auto tiles are fitted.
std::optional<SpecProblem> mask_tiles_field_problem(const Spec& spec) {
  const std::string why = mask_tiles_problem(spec, spec.tiles);
  if (why.empty()) return std::nullopt;
  const bool rows = spec.block_q % spec.tiles.block_m != 0;
  SpecProblem p = problem(rows ? "tiles.block_m" : "tiles.block_n", why);
  p.allowed = rows ? "a divisor of the mask's block_q (a multiple of 16 and of 16*warps)"
                   : "a divisor of the mask's block_k (a multiple of 16)";
  return p;
}

}  // namespace

std::optional<SpecProblem> find_explicit_tiles_problem(const Tiles& t) {
  if (auto p = range_problem("tiles.block_m", t.block_m)) return p;
  if (auto p = range_problem("tiles.block_n", t.block_n)) return p;
  if (std::find(kWarpCounts.begin(), kWarpCounts.end(), t.warps) == kWarpCounts.end())
    return problem("tiles.warps", fmt::format("{} is not a supported warp count", t.warps));
  if (auto p = range_problem("tiles.stages", t.stages)) return p;
  // The warp-specialised kernel: a producer and two consumer warp groups of 64 rows.
  if (t.warps == kWarpSpecializedWarps) {
    if (t.block_m != 2 * kWarpGroupRows)
      return problem("tiles.block_m",
                     fmt::format("{}: with 12 warps (the warp-specialised kernel) block_m is {}",
                                 t.block_m, 2 * kWarpGroupRows));
    return std::nullopt;
  }
  // Warps split the query rows, and each warp owns whole 16-row MMA tiles.
  if (t.block_m % (kMmaRows * t.warps) != 0)
    return problem("tiles.block_m",
                   fmt::format("{} rows cannot be split into whole 16-row tiles over {} warps",
                               t.block_m, t.warps));
  return std::nullopt;
}

std::string_view allowed_values(std::string_view field) {
  const SpecField* row = find_spec_field(field);
  return row ? row->allowed : std::string_view();
}

std::optional<SpecProblem> find_spec_problem(const Spec& spec) {
  if (auto p = name_problem(spec.name)) return p;
  if (auto p = range_problem("head_dim_qk", spec.head_dim_qk)) return p;
  if (auto p = range_problem("head_dim_v", spec.head_dim_v)) return p;
  if (auto p = enum_problem(spec)) return p;
  if (auto p = window_problem(spec)) return p;
  if (auto p = block_mask_problem(spec)) return p;
  // All zero means auto; anything else must be a complete configuration (Tiles::is_auto()
  // looks at block_m only, so a half-filled struct is caught here).
  if (spec.tiles == Tiles{}) return std::nullopt;
  if (auto p = find_explicit_tiles_problem(spec.tiles)) return p;
  return mask_tiles_field_problem(spec);
}

std::string default_spec_name(const Spec& spec) {
  return fmt::format("qk{}_v{}_{}{}{}", spec.head_dim_qk, spec.head_dim_v, to_string(spec.dtype),
                     spec.causal ? "_causal" : "", mask_label(spec));
}

std::string mask_label(const Spec& spec) {
  switch (spec.mask) {
    case MaskKind::None: return "";
    case MaskKind::SlidingWindow:
      return fmt::format("_window{}_{}", spec.window_left, spec.window_right);
    case MaskKind::BlockSparse: return fmt::format("_bsparse{}x{}", spec.block_q, spec.block_k);
    case MaskKind::Pattern:
      switch (spec.pattern) {
        case PatternKind::Local: return fmt::format("_local{}b{}", spec.pattern_window, spec.block_q);
        case PatternKind::Strided:
          return fmt::format("_strided{}b{}", spec.pattern_stride, spec.block_q);
        case PatternKind::GlobalLocal:
          return fmt::format("_global{}local{}b{}", spec.pattern_global, spec.pattern_window,
                             spec.block_q);
        case PatternKind::None: break;
      }
      break;
  }
  return "_mask";
}

std::string resolved_spec_name(const Spec& spec) {
  return spec.name.empty() ? default_spec_name(spec) : spec.name;
}

}  // namespace flashjit::gen

namespace flashjit {

void Spec::validate() const {
  if (auto p = gen::find_spec_problem(*this))
    throw Error(ErrorKind::Spec, fmt::format("{}: {}; allowed: {}", p->field, p->what, p->allowed));
}

}  // namespace flashjit
