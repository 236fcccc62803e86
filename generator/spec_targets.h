// For which compile targets a spec gets a forward kernel, and why not where it gets none, so
// that `flashjit check` refuses what `gen` and `compile` would refuse, at the field to blame.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/spec_rules.h"

namespace flashjit::gen {

// The targets the spec's `arch` allows: sm90a only sm_90a; auto and sm80 every known target.
std::vector<std::string> allowed_targets(const Spec& spec);

// Why `spec` (valid) gets no forward kernel on `target`, or nothing when make_plan plans one
// for a 16-byte aligned, TMA-loadable call: `arch` when it excludes the target; `tiles` when
// the given tiles break the rules of the kernel the target runs (its tile shape, shared
// memory, registers), or for `tiles: auto` when none of the built-in tilings fits.
std::optional<SpecProblem> target_problem(const Spec& spec, const std::string& target);

}  // namespace flashjit::gen
