// One tune DB entry as JSON, each kind with its own fields: what TuneDb writes and reads back.
//
// An entry's "kind" says what it holds: "tiles" (also every entry without a "kind", as files
// from before kinds have them), "decode_splits" or "backward_tiles". A kind this flashjit does
// not know is a bad entry, skipped with a warning like any other, so new kinds need no new
// file version. Decode and backward entries have no "tiles": a flashjit from before kinds
// skips them as bad entries too, rather than reading them as the forward's tiles.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/tune_db.h"

namespace flashjit::tune {

nlohmann::json entry_json(const TuneEntry& entry);
nlohmann::json entry_json(const DecodeEntry& entry);
nlohmann::json entry_json(const BackwardEntry& entry);

// Adds the entry `j` to the list of its kind in `into`; throws Error(Cache) or a
// json::exception, either naming the field, for one it cannot read (an unknown kind too).
void read_entry(const nlohmann::json& j, TuneDbEntries& into);

// A value for a message: scalars as written (cut), lists and objects by kind only, since
// dumping them is recursive and a forged file may nest them a million levels deep.
std::string brief(const nlohmann::json& value);

}  // namespace flashjit::tune
