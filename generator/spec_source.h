// A spec read from YAML with where each of its fields was written, so that a rule checked
// after reading (a target's tile rules, generator/spec_targets.h) is reported at the user's
// line in the user's words, as the reader's own errors are.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "flashjit/flashjit.h"
#include "generator/spec_rules.h"

namespace flashjit::gen {

// Where a field's value was written (1-based) and under which key ("head_dim" for
// head_dim_qk, "tiles.block_m").
struct FieldLocation {
  int line = 1;
  int column = 1;
  std::string key;
};

struct LocatedSpec {
  Spec spec;
  std::string source;  // the file, or "<string>"
  // By canonical field name ("head_dim_qk", "tiles", "tiles.block_m"); a map's own entry
  // ("tiles", "mask") is where its value starts.
  std::map<std::string, FieldLocation, std::less<>> fields;
};

// Spec::from_yaml and Spec::from_file, keeping the locations.
LocatedSpec read_located_spec(const std::string& text, const std::string& source);
LocatedSpec read_located_spec_file(const std::string& path);

// Error(Spec) "file:line:column: key: what; allowed: ..." at the place the user wrote
// `problem.field` (the document's start when it was not written: a default).
Error located_error(const LocatedSpec& spec, const SpecProblem& problem);

}  // namespace flashjit::gen
