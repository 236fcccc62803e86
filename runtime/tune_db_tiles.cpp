#include "runtime/tune_db_tiles.h"

#include <fmt/format.h>

#include "runtime/tune_db.h"
#include "runtime/tune_key.h"

namespace flashjit::rt {

std::optional<Tiles> TuneDbTiles::tiles(const Query& query, std::string& why) const {
  try {
    const tune::Lookup found = tune::TuneDb(tune::default_db_path())
                                   .lookup(tune::gpu_identity(query.device),
                                           tune::spec_hash(query.spec),
                                           tune::bucket_for(query.seqlen_q, query.seqlen_k,
                                                            query.batch, query.heads_q));
    why = found.note;
    if (!found.entry) return std::nullopt;
    if (found.entry->target != query.target) {
      why += fmt::format("; tuned for {}, not {}: ignored", found.entry->target, query.target);
      return std::nullopt;
    }
    return found.entry->tiles;
  } catch (const Error& error) {
    why = fmt::format("tune DB unusable: {}", error.what());
    return std::nullopt;
  }
}

}  // namespace flashjit::rt
