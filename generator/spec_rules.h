// The rules a Spec must obey, in one place, so that Spec::validate (C++-built specs) and
// Spec::from_yaml (which adds the file:line:column of the offending key) cannot disagree.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "flashjit/flashjit.h"

namespace flashjit::gen {

// One broken rule. `field` is the canonical field name ("head_dim_qk", "tiles.block_m", ...).
struct SpecProblem {
  std::string field;
  std::string what;     // what is wrong, e.g. "600 is out of range"
  std::string allowed;  // what would be accepted
};

// The first rule `spec` breaks, or nothing when it is valid.
std::optional<SpecProblem> find_spec_problem(const Spec& spec);

// The first rule a tiles configuration breaks, treating every field as given (all zero is
// not "auto" here: the YAML map form must name real values).
std::optional<SpecProblem> find_explicit_tiles_problem(const Tiles& tiles);

// The text shown after "allowed:" for a field: its row's in the field table (spec_fields.h),
// by canonical name or a YAML-only key such as "head_dim", "hopper" or "tiles".
std::string_view allowed_values(std::string_view field);

// The part of names that tells masks apart: "" (none), "_window1024_0", "_bsparse128x64",
// "_local2b128", "_strided4b64", "_global1local2b128". Default spec names use it, and so do
// kernel names for block masks (a window there is the shorter "_w1024_0").
std::string mask_label(const Spec& spec);

// The name a spec gets when none is given: qk100_v100_bf16_causal.
std::string default_spec_name(const Spec& spec);

// The name the spec is known by: its own, else the default.
std::string resolved_spec_name(const Spec& spec);

}  // namespace flashjit::gen
