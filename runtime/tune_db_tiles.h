// The default TileSource: the tune DB that `flashjit tune` writes (FLASHJIT_TUNE_DB, else
// <cache dir>/tune.json), read on each question so that a DB tuned while an application runs
// serves its next new shape. A DB that cannot be read is never an error for the caller: the
// heuristic serves and `why` says so.
#pragma once

#include <string>

#include "flashjit/flashjit.h"
#include "runtime/tune_db.h"

namespace flashjit::rt {

class TuneDbTiles final : public TileSource {
 public:
  std::optional<Tiles> tiles(const Query& query, std::string& why) const override;
  std::optional<BackwardTiles> backward_tiles(const Query& query, std::string& why) const override;
};

// Why the backward entry `entry` does not serve `spec` on `target` ("" when it does): another
// target, a step's path other than the one the spec now takes, or tiles that path cannot run.
// The runtime and `flashjit build --tune-db` apply the same test.
std::string backward_entry_problem(const Spec& spec, const std::string& target,
                                   const tune::BackwardEntry& entry);

}  // namespace flashjit::rt
