#include "runtime/tune_db_tiles.h"

#include <fmt/format.h>

#include "generator/kernel_path.h"
#include "runtime/operation.h"
#include "runtime/tune_key.h"

namespace flashjit::rt {
namespace {

// The entry `lookup` (TuneDb::lookup or lookup_backward) finds for the query's GPU, spec and
// bucket, with its note in `why`; nullopt, said in `why`, for a DB that cannot be read.
template <class Entry, class Lookup>
std::optional<Entry> find_for(const TileSource::Query& query, std::string& why, Lookup lookup) {
  try {
    tune::Found<Entry> found = lookup(
        tune::TuneDb(tune::default_db_path()), tune::gpu_identity(query.device),
        tune::spec_hash(query.spec),
        tune::bucket_for(query.seqlen_q, query.seqlen_k, query.batch, query.heads_q));
    why = found.note;
    return std::move(found.entry);
  } catch (const Error& error) {
    why = fmt::format("tune DB unusable: {}", error.what());
    return std::nullopt;
  }
}

}  // namespace

std::optional<Tiles> TuneDbTiles::tiles(const Query& query, std::string& why) const {
  const std::optional<tune::TuneEntry> entry = find_for<tune::TuneEntry>(
      query, why, [](const tune::TuneDb& db, const auto&... key) { return db.lookup(key...); });
  if (!entry) return std::nullopt;
  if (entry->target != query.target) {
    why += fmt::format("; tuned for {}, not {}: ignored", entry->target, query.target);
    return std::nullopt;
  }
  return entry->tiles;
}

std::optional<BackwardTiles> TuneDbTiles::backward_tiles(const Query& query,
                                                         std::string& why) const {
  const std::optional<tune::BackwardEntry> entry = find_for<tune::BackwardEntry>(
      query, why,
      [](const tune::TuneDb& db, const auto&... key) { return db.lookup_backward(key...); });
  if (!entry) return std::nullopt;
  if (const std::string problem = backward_entry_problem(query.spec, query.target, *entry);
      !problem.empty()) {
    why += fmt::format("; {}: ignored", problem);
    return std::nullopt;
  }
  return entry->tiles;
}

std::string backward_entry_problem(const Spec& spec, const std::string& target,
                                   const tune::BackwardEntry& entry) {
  if (entry.target != target) return fmt::format("tuned for {}, not {}", entry.target, target);
  const struct {
    gen::Step step;
    const std::string& tuned_for;
  } steps[] = {{gen::Step::BwdDkDv, entry.dkdv_path}, {gen::Step::BwdDq, entry.dq_path}};
  for (const auto& s : steps) {
    const char* path = gen::choose_path(s.step, spec, target).name;
    if (s.tuned_for != path)
      return fmt::format("tuned for the {} kernel, and the spec now takes {}", s.tuned_for, path);
  }
  return backward_tiles_problem(spec, target, entry.tiles);
}

}  // namespace flashjit::rt
