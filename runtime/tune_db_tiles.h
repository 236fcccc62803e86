// The default TileSource: the tune DB that `flashjit tune` writes (FLASHJIT_TUNE_DB, else
// <cache dir>/tune.json), read on each question so that a DB tuned while an application runs
// serves its next new shape. A DB that cannot be read is never an error for the caller: the
// heuristic serves and `why` says so.
#pragma once

#include "flashjit/flashjit.h"

namespace flashjit::rt {

class TuneDbTiles final : public TileSource {
 public:
  std::optional<Tiles> tiles(const Query& query, std::string& why) const override;
};

}  // namespace flashjit::rt
