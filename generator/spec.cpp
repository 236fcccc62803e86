// Spec validation: the value ranges every spec must satisfy, however it was built.
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "flashjit/flashjit.h"
#include "generator/spec_rules.h"

namespace flashjit::gen {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kMaxNameLength = 64;
constexpr int kMmaRows = 16;  // rows of one mma.sync m16n8k16 tile: the unit of block_m/block_n
constexpr int kMaxBlock = 256;
constexpr int kMaxStages = 4;
constexpr std::array kWarpCounts = {1, 2, 4, 8, 12, 16};
constexpr int kWarpSpecializedWarps = 12;  // the sm90 kernel: producer + two consumer warp groups
constexpr int kWarpGroupRows = 64;         // query rows of one consumer warp group (wgmma M)

struct FieldAllowed {
  std::string_view field;
  std::string_view allowed;
};

constexpr FieldAllowed kAllowed[] = {
    {"name", "1 to 64 characters from A-Z a-z 0-9 _ -"},
    {"head_dim", "an integer in 1..512"},
    {"head_dim_qk", "an integer in 1..512"},
    {"head_dim_v", "an integer in 1..512"},
    {"dtype", "fp16, bf16"},
    {"causal", "true, false"},
    {"mask", "none, or {sliding_window: {left: L, right: R}}"},
    {"mask.sliding_window", "a map with both left and right"},
    {"mask.sliding_window.left", "an integer >= 0: keys visible left of the diagonal"},
    {"mask.sliding_window.right", "an integer >= 0 (0 with causal): keys visible right of it"},
    {"arch", "auto, sm80, sm90a"},
    {"hopper", "a map with the key warp_specialization"},
    {"hopper.warp_specialization", "true, false"},
    {"tiles", "auto, or a map with all of block_m, block_n, warps, stages"},
    {"tiles.block_m", "a multiple of 16 in 16..256 that is also a multiple of 16*warps"},
    {"tiles.block_n", "a multiple of 16 in 16..256"},
    {"tiles.warps", "1, 2, 4, 8, 16 (the sm80 kernel), 12 (the warp-specialised kernel)"},
    {"tiles.stages", "an integer in 1..4"},
};

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

std::optional<SpecProblem> head_dim_problem(std::string_view field, int value) {
  if (value < 1 || value > kMaxHeadDim)
    return problem(field, fmt::format("{} is out of range", value));
  return std::nullopt;
}

std::optional<SpecProblem> block_problem(std::string_view field, int value) {
  if (value < kMmaRows || value > kMaxBlock || value % kMmaRows != 0)
    return problem(field, fmt::format("{} is not a multiple of 16 in 16..256", value));
  return std::nullopt;
}

// Enum values outside the declared set only arise from casts in C++; caught here so that
// nothing downstream indexes a table with them.
std::optional<SpecProblem> enum_problem(const Spec& spec) {
  if (spec.dtype != DType::F16 && spec.dtype != DType::BF16)
    return problem("dtype", fmt::format("{} is not a DType", static_cast<int>(spec.dtype)));
  if (spec.arch != Arch::Auto && spec.arch != Arch::Sm80 && spec.arch != Arch::Sm90a)
    return problem("arch", fmt::format("{} is not an Arch", static_cast<int>(spec.arch)));
  if (spec.mask != MaskKind::None && spec.mask != MaskKind::SlidingWindow)
    return problem("mask", fmt::format("{} is not a MaskKind", static_cast<int>(spec.mask)));
  return std::nullopt;
}

std::optional<SpecProblem> window_problem(const Spec& spec) {
  if (spec.mask != MaskKind::SlidingWindow) {
    if (spec.window_left != 0 || spec.window_right != 0)
      return problem("mask", fmt::format("window_left/window_right ({}, {}) are set but the mask "
                                         "is {}", spec.window_left, spec.window_right,
                                         to_string(spec.mask)));
    return std::nullopt;
  }
  if (spec.window_left < 0)
    return problem("mask.sliding_window.left", fmt::format("{} is negative", spec.window_left));
  if (spec.window_right < 0)
    return problem("mask.sliding_window.right", fmt::format("{} is negative", spec.window_right));
  if (spec.causal && spec.window_right != 0)
    return problem("mask.sliding_window.right",
                   fmt::format("{} with causal: true, which hides every key right of the "
                               "diagonal", spec.window_right));
  return std::nullopt;
}

}  // namespace

std::optional<SpecProblem> find_explicit_tiles_problem(const Tiles& t) {
  if (auto p = block_problem("tiles.block_m", t.block_m)) return p;
  if (auto p = block_problem("tiles.block_n", t.block_n)) return p;
  if (std::find(kWarpCounts.begin(), kWarpCounts.end(), t.warps) == kWarpCounts.end())
    return problem("tiles.warps", fmt::format("{} is not a supported warp count", t.warps));
  if (t.stages < 1 || t.stages > kMaxStages)
    return problem("tiles.stages", fmt::format("{} is out of range", t.stages));
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
  for (const auto& entry : kAllowed)
    if (entry.field == field) return entry.allowed;
  return {};
}

std::optional<SpecProblem> find_spec_problem(const Spec& spec) {
  if (auto p = name_problem(spec.name)) return p;
  if (auto p = head_dim_problem("head_dim_qk", spec.head_dim_qk)) return p;
  if (auto p = head_dim_problem("head_dim_v", spec.head_dim_v)) return p;
  if (auto p = enum_problem(spec)) return p;
  if (auto p = window_problem(spec)) return p;
  // All zero means auto; anything else must be a complete configuration (Tiles::is_auto()
  // looks at block_m only, so a half-filled struct is caught here).
  if (spec.tiles == Tiles{}) return std::nullopt;
  return find_explicit_tiles_problem(spec.tiles);
}

std::string default_spec_name(const Spec& spec) {
  const std::string window =
      spec.mask == MaskKind::SlidingWindow
          ? fmt::format("_window{}_{}", spec.window_left, spec.window_right)
          : "";
  return fmt::format("qk{}_v{}_{}{}{}", spec.head_dim_qk, spec.head_dim_v, to_string(spec.dtype),
                     spec.causal ? "_causal" : "", window);
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
