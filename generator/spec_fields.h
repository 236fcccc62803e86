// The spec's fields in one table: the YAML tree a spec file is written in, the Spec member
// each key reads and writes, and what the tune key and the "allowed:" of messages call it.
// The reader and printer (spec_yaml.cpp), the messages of validation (spec.cpp) and the tune
// key (runtime/tune_key.cpp) walk this table; the kernel's constants come from
// spec_constants(). Adding a field is a row here plus its use.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "flashjit/flashjit.h"

namespace flashjit::gen {

struct SpecProblem;

// A Spec member a row reads and writes (tiles' members are those of Spec::tiles).
using Member = std::variant<std::string Spec::*, int Spec::*, bool Spec::*, DType Spec::*,
                            Arch Spec::*, MaskKind Spec::*, PatternKind Spec::*,
                            DecodeMode Spec::*, int Tiles::*>;
// The value of a Member.
using MemberValue =
    std::variant<std::string, int, bool, DType, Arch, MaskKind, PatternKind, DecodeMode>;

MemberValue value_of(const Spec& spec, const Member& member);
void assign(Spec& spec, const Member& member, const MemberValue& value);

// The integers a row accepts; validation (spec.cpp) checks them whenever the row applies.
struct IntRange {
  int min = 0, max = 0;
  int step = 1;  // > 1: multiples of it only (block sizes: whole 16-row MMA tiles)
  // A window or block count, bounded only so that no int arithmetic overflows: its messages
  // say "is negative" / "is above" rather than "is out of range".
  bool count = false;
};

enum class Node {
  Value,  // a scalar, stored in the row's members
  Map,    // a map of the rows under it, or `word` alone for "the defaults"
  OneOf,  // `word`, or a map with exactly one of the maps under it (which one is the value)
};

// One key of the YAML tree. The table lists a map before the rows under it, in the order
// the printout and the messages use.
struct SpecField {
  std::string_view path;  // the YAML keys from the top, dotted: "mask.sliding_window.left"
  Node node = Node::Value;
  // What the key sets: a Value stores itself in every member (mask.pattern.block sets
  // block_q and block_k); a OneOf's member records which of its maps was given.
  std::vector<Member> members{};
  // The member's name in the tune key's canonical line ("window_left"); empty when the row is
  // not part of the key or another row already puts its member there.
  std::string_view hash_key{};
  std::string_view allowed{};  // shown after "allowed:" in messages about this key
  std::optional<IntRange> range{};  // an integer row's bounds
  bool required = false;     // must be given whenever its map is (and the row applies)
  // A key that stands for others (head_dim for head_dim_qk + head_dim_v): given alone or
  // they are given together; it writes their members and is never printed.
  std::vector<std::string_view> alias_of{};
  std::string_view word{};                // Map/OneOf: the scalar that keeps the defaults
  bool (*is_word)(const Spec&) = nullptr;  // Map/OneOf: printed as `word` when this holds
  std::optional<MaskKind> selects{};      // a map under a OneOf: the mask its presence selects
  std::string_view form{};                // such a map's shape, for "X needs its map: ..."
  // The row under its map that the others depend on (mask.pattern.kind): read first.
  bool selector = false;
  // When the row belongs to the spec, given its selector (a pattern kind's own keys);
  // nullptr: always. Rows that do not apply are neither accepted nor printed.
  bool (*applies)(const Spec&) = nullptr;
  std::optional<int> default_value{};  // set when its map is entered (mask.pattern.block: 128)
  // A Map's own rule, checked as soon as the map is read (tiles: a complete configuration).
  std::optional<SpecProblem> (*check)(const Spec&) = nullptr;

  std::string_view key() const;     // the last part of the path: "left"
  std::string_view parent() const;  // the path of its map: "mask.sliding_window" ("" on top)
};

// Every row, maps before the rows under them.
std::span<const SpecField> spec_fields();
// The row at `path`, or nullptr.
const SpecField* find_spec_field(std::string_view path);
// The rows directly under the map at `path` ("" for the top level), in table order.
std::vector<const SpecField*> spec_fields_under(std::string_view path);

// "head_dim_qk=100;head_dim_v=100;dtype=bf16;causal=1;mask=none;...": every hashed member,
// in table order (integers in decimal, booleans 1/0, enums as to_string spells them).
std::string canonical_spec_fields(const Spec& spec);

// Whether `a` and `b` agree on every member of the table (the name compared as given).
bool same_spec_fields(const Spec& a, const Spec& b);

// The spec's part of the generated KernelConfig: "  static constexpr int kHeadDimQk = 100;\n"
// and so on. The head dims come before the plan's tile constants, the mask's after them.
enum class ConstantGroup { HeadDims, Mask };
std::string spec_constants(const Spec& spec, ConstantGroup group);

}  // namespace flashjit::gen
