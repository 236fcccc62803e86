#include "generator/spec_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include "generator/spec_rules.h"

namespace flashjit::gen {
namespace {

bool tiles_auto(const Spec& s) { return s.tiles.is_auto(); }
bool mask_none(const Spec& s) { return s.mask == MaskKind::None; }
bool local(const Spec& s) { return s.pattern == PatternKind::Local; }
bool strided(const Spec& s) { return s.pattern == PatternKind::Strided; }
bool global_local(const Spec& s) { return s.pattern == PatternKind::GlobalLocal; }
std::optional<SpecProblem> tiles_problem(const Spec& s) {
  return find_explicit_tiles_problem(s.tiles);
}

constexpr int kDefaultPatternBlock = 128;  // FlexAttention's default block size
constexpr int kMmaRows = 16;  // rows of one mma.sync m16n8k16 tile: the unit of block sizes
constexpr IntRange kHeadDims{.min = 1, .max = 512};
constexpr IntRange kTileBlocks{.min = kMmaRows, .max = 256, .step = kMmaRows};
// Keeps block indices times block sizes in int range.
constexpr IntRange kMaskBlocks{.min = kMmaRows, .max = 65536, .step = kMmaRows};
// The largest window (keys) and pattern block count (blocks, stride, global_blocks,
// window_blocks). The kernels (templates/softmax.cuh, key_blocks.cuh) and the fp64 reference
// (verify/reference.cpp) add and subtract these to positions in int: row + diag + right,
// row + diag - left, qb + blocks + 1, qb - blocks, blocks - first + stride - 1. Positions and
// diag = seqlen_k - seqlen_q lie within +-2^30 (a sequence of 2^30 rows of Q alone fills a
// 128 GiB GPU at head dim 64), block indices within 2^26; one term up to 2^30 more keeps each
// sum inside int. A wider window than any sequence hides nothing more.
constexpr int kMaxMaskSpan = 1 << 30;
constexpr IntRange kSpan{.min = 0, .max = kMaxMaskSpan, .count = true};
constexpr IntRange kPositiveSpan{.min = 1, .max = kMaxMaskSpan, .count = true};

// The order of the hashed rows is the tune key's: it must not change (tests pin the hashes).
const std::vector<SpecField> kFields = {
    {.path = "name",
     .members = {&Spec::name},
     .allowed = "1 to 64 characters from A-Z a-z 0-9 _ -"},
    {.path = "head_dim",
     .allowed = "an integer in 1..512",
     .alias_of = {"head_dim_qk", "head_dim_v"}},
    {.path = "head_dim_qk",
     .members = {&Spec::head_dim_qk},
     .hash_key = "head_dim_qk",
     .allowed = "an integer in 1..512",
     .range = kHeadDims},
    {.path = "head_dim_v",
     .members = {&Spec::head_dim_v},
     .hash_key = "head_dim_v",
     .allowed = "an integer in 1..512",
     .range = kHeadDims},
    {.path = "dtype", .members = {&Spec::dtype}, .hash_key = "dtype", .allowed = "fp16, bf16"},
    {.path = "causal", .members = {&Spec::causal}, .hash_key = "causal", .allowed = "true, false"},
    {.path = "mask",
     .node = Node::OneOf,
     .members = {&Spec::mask},
     .hash_key = "mask",
     .allowed = "none, or one of {sliding_window: {left: L, right: R}}, {block_sparse: {block_q: "
                "BQ, block_k: BK}}, {pattern: {kind: local|strided|global_local, block: B, ...}}",
     .word = "none",
     .is_word = mask_none},

    {.path = "mask.sliding_window",
     .node = Node::Map,
     .allowed = "a map with both left and right",
     .selects = MaskKind::SlidingWindow,
     .form = "{left: L, right: R}"},
    {.path = "mask.sliding_window.left",
     .members = {&Spec::window_left},
     .hash_key = "window_left",
     .allowed = "an integer in 0..1073741824: keys visible left of the diagonal",
     .range = kSpan,
     .required = true},
    {.path = "mask.sliding_window.right",
     .members = {&Spec::window_right},
     .hash_key = "window_right",
     .allowed = "an integer in 0..1073741824 (0 with causal): keys visible right of it",
     .range = kSpan,
     .required = true},

    {.path = "mask.block_sparse",
     .node = Node::Map,
     .allowed = "a map with both block_q and block_k",
     .selects = MaskKind::BlockSparse,
     .form = "{block_q: BQ, block_k: BK}"},
    {.path = "mask.block_sparse.block_q",
     .members = {&Spec::block_q},
     .hash_key = "block_q",
     .allowed = "a multiple of 16 in 16..65536: query rows per mask block",
     .range = kMaskBlocks,
     .required = true},
    {.path = "mask.block_sparse.block_k",
     .members = {&Spec::block_k},
     .hash_key = "block_k",
     .allowed = "a multiple of 16 in 16..65536: keys per mask block",
     .range = kMaskBlocks,
     .required = true},

    {.path = "mask.pattern",
     .node = Node::Map,
     .allowed = "a map with kind, optional block, and the kind's own keys: local: blocks; "
                "strided: stride; global_local: global_blocks, window_blocks",
     .selects = MaskKind::Pattern,
     .form = "{kind: local|strided|global_local, block: B, ...}"},
    {.path = "mask.pattern.kind",
     .members = {&Spec::pattern},
     .hash_key = "pattern",
     .allowed = "local, strided, global_local",
     .required = true,
     .selector = true},
    // block_q and block_k are in the tune key through the block_sparse rows.
    {.path = "mask.pattern.block",
     .members = {&Spec::block_q, &Spec::block_k},
     .allowed = "a multiple of 16 in 16..65536 (default 128): rows and keys per block",
     .range = kMaskBlocks,
     .default_value = kDefaultPatternBlock},
    {.path = "mask.pattern.blocks",
     .members = {&Spec::pattern_window},
     .hash_key = "pattern_window",
     .allowed = "an integer in 0..1073741824: key blocks visible on each side of the diagonal",
     .range = kSpan,
     .required = true,
     .applies = local},
    {.path = "mask.pattern.stride",
     .members = {&Spec::pattern_stride},
     .hash_key = "pattern_stride",
     .allowed = "an integer in 1..1073741824: key blocks whose distance is a multiple of it",
     .range = kPositiveSpan,
     .required = true,
     .applies = strided},
    {.path = "mask.pattern.global_blocks",
     .members = {&Spec::pattern_global},
     .hash_key = "pattern_global",
     .allowed = "an integer in 1..1073741824: leading blocks that see and are seen by all",
     .range = kPositiveSpan,
     .required = true,
     .applies = global_local},
    // pattern_window is in the tune key through mask.pattern.blocks.
    {.path = "mask.pattern.window_blocks",
     .members = {&Spec::pattern_window},
     .allowed = "an integer in 0..1073741824: key blocks visible on each side of the diagonal",
     .range = kSpan,
     .required = true,
     .applies = global_local},

    {.path = "arch", .members = {&Spec::arch}, .hash_key = "arch", .allowed = "auto, sm80, sm90a"},
    {.path = "hopper", .node = Node::Map, .allowed = "a map with the key warp_specialization"},
    {.path = "hopper.warp_specialization",
     .members = {&Spec::warp_specialization},
     .hash_key = "warp_specialization",
     .allowed = "true, false"},
    // Not in the tune key: the forward's tiles do not depend on it.
    {.path = "backward", .node = Node::Map, .allowed = "a map with the key deterministic"},
    {.path = "backward.deterministic",
     .members = {&Spec::deterministic},
     .allowed = "true (bitwise-identical gradients on every run), false (dQ summed with atomics)"},
    // Not in the tune key: it chooses between operations, whose tiles are tuned apart.
    {.path = "decode",
     .members = {&Spec::decode},
     .allowed = "auto (few query rows against many keys, and every KV-cache call), always, "
                "never"},
    // Not in the tune key: the tiles are what is tuned.
    {.path = "tiles",
     .node = Node::Map,
     .allowed = "auto, or a map with all of block_m, block_n, warps, stages",
     .word = "auto",
     .is_word = tiles_auto,
     .check = tiles_problem},
    {.path = "tiles.block_m",
     .members = {&Tiles::block_m},
     .allowed = "a multiple of 16 in 16..256 that is also a multiple of 16*warps",
     .range = kTileBlocks,
     .required = true},
    {.path = "tiles.block_n",
     .members = {&Tiles::block_n},
     .allowed = "a multiple of 16 in 16..256",
     .range = kTileBlocks,
     .required = true},
    {.path = "tiles.warps",
     .members = {&Tiles::warps},
     .allowed = "1, 2, 4, 8, 16 (the sm80 kernel), 12 (the warp-specialised kernel)",
     .required = true},
    {.path = "tiles.stages",
     .members = {&Tiles::stages},
     .allowed = "an integer in 1..4",
     .range = IntRange{.min = 1, .max = 4},
     .required = true},
};

// The templates' spelling of each pattern (fj::Pattern in templates/fwd_sm80.cuh).
const char* pattern_constant(PatternKind kind) {
  switch (kind) {
    case PatternKind::None: return "fj::Pattern::kNone";
    case PatternKind::Local: return "fj::Pattern::kLocal";
    case PatternKind::Strided: return "fj::Pattern::kStrided";
    case PatternKind::GlobalLocal: return "fj::Pattern::kGlobalLocal";
  }
  throw Error(ErrorKind::Usage, "unknown pattern kind");
}

const char* cpp_bool(bool value) { return value ? "true" : "false"; }

// A constexpr of KernelConfig that the templates read, computed from the spec.
struct SpecConstant {
  ConstantGroup group;
  std::string_view type;
  std::string_view name;
  std::string (*value)(const Spec&);
};

// In the order the generated source has them (generated sources are compared byte for byte).
const SpecConstant kConstants[] = {
    {ConstantGroup::HeadDims, "int", "kHeadDimQk",
     [](const Spec& s) { return std::to_string(s.head_dim_qk); }},
    {ConstantGroup::HeadDims, "int", "kHeadDimV",
     [](const Spec& s) { return std::to_string(s.head_dim_v); }},
    {ConstantGroup::Mask, "bool", "kCausal",
     [](const Spec& s) -> std::string { return cpp_bool(s.causal); }},
    {ConstantGroup::Mask, "bool", "kWindow",
     [](const Spec& s) -> std::string { return cpp_bool(s.mask == MaskKind::SlidingWindow); }},
    {ConstantGroup::Mask, "int", "kWindowLeft",
     [](const Spec& s) { return std::to_string(s.window_left); }},
    {ConstantGroup::Mask, "int", "kWindowRight",
     [](const Spec& s) { return std::to_string(s.window_right); }},
    {ConstantGroup::Mask, "bool", "kBlockSparse",
     [](const Spec& s) -> std::string { return cpp_bool(s.mask == MaskKind::BlockSparse); }},
    {ConstantGroup::Mask, "fj::Pattern", "kPattern",
     [](const Spec& s) -> std::string { return pattern_constant(s.pattern); }},
    {ConstantGroup::Mask, "int", "kMaskBlockQ",
     [](const Spec& s) { return std::to_string(s.block_q); }},
    {ConstantGroup::Mask, "int", "kMaskBlockK",
     [](const Spec& s) { return std::to_string(s.block_k); }},
    {ConstantGroup::Mask, "int", "kPatternWindow",
     [](const Spec& s) { return std::to_string(s.pattern_window); }},
    {ConstantGroup::Mask, "int", "kPatternStride",
     [](const Spec& s) { return std::to_string(s.pattern_stride); }},
    {ConstantGroup::Mask, "int", "kPatternGlobal",
     [](const Spec& s) { return std::to_string(s.pattern_global); }},
};

// How the tune key writes a value: the form it had before the table (1/0 for booleans).
std::string canonical_text(const MemberValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) return v;
        else if constexpr (std::is_same_v<T, int>) return std::to_string(v);
        else if constexpr (std::is_same_v<T, bool>) return v ? "1" : "0";
        else return to_string(v);
      },
      value);
}

}  // namespace

MemberValue value_of(const Spec& spec, const Member& member) {
  return std::visit(
      [&](auto pointer) -> MemberValue {
        if constexpr (std::is_same_v<decltype(pointer), int Tiles::*>) return spec.tiles.*pointer;
        else return spec.*pointer;
      },
      member);
}

void assign(Spec& spec, const Member& member, const MemberValue& value) {
  std::visit(
      [&](auto pointer) {
        auto& target = [&]() -> auto& {
          if constexpr (std::is_same_v<decltype(pointer), int Tiles::*>) return spec.tiles.*pointer;
          else return spec.*pointer;
        }();
        target = std::get<std::decay_t<decltype(target)>>(value);
      },
      member);
}

std::string_view SpecField::key() const {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

std::string_view SpecField::parent() const {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

std::span<const SpecField> spec_fields() { return kFields; }

const SpecField* find_spec_field(std::string_view path) {
  auto it = std::find_if(kFields.begin(), kFields.end(),
                         [&](const SpecField& f) { return f.path == path; });
  return it == kFields.end() ? nullptr : &*it;
}

std::vector<const SpecField*> spec_fields_under(std::string_view path) {
  std::vector<const SpecField*> out;
  for (const SpecField& f : kFields)
    if (f.parent() == path) out.push_back(&f);
  return out;
}

std::string canonical_spec_fields(const Spec& spec) {
  std::vector<std::string> parts;
  for (const SpecField& f : kFields)
    if (!f.hash_key.empty())
      parts.push_back(
          fmt::format("{}={}", f.hash_key, canonical_text(value_of(spec, f.members[0]))));
  return fmt::format("{}", fmt::join(parts, ";"));
}

bool same_spec_fields(const Spec& a, const Spec& b) {
  for (const SpecField& f : kFields)
    for (const Member& m : f.members)
      if (value_of(a, m) != value_of(b, m)) return false;
  return true;
}

std::string spec_constants(const Spec& spec, ConstantGroup group) {
  std::string out;
  for (const SpecConstant& c : kConstants)
    if (c.group == group)
      out += fmt::format("  static constexpr {} {} = {};\n", c.type, c.name, c.value(spec));
  return out;
}

}  // namespace flashjit::gen
