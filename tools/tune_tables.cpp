#include "tools/tune_tables.h"

#include <string>

#include <fmt/format.h>

#include "autotune/candidates.h"

namespace flashjit::cli {
namespace {

double speed_up(double heuristic_ms, double tuned_ms) {
  return tuned_ms > 0 ? heuristic_ms / tuned_ms : 0.0;
}

// A split count for the tables: 0 is "heuristic" in an entry's count, "-" (not known) in its
// heuristic's.
std::string splits_label(int splits, const char* zero) {
  return splits > 0 ? std::to_string(splits) : zero;
}

// The tiles tuners' table, a row a bucket, then a line a spec; `width` fits the tiles' label.
template <class Candidate, class Entry>
void print_tile_results(const std::vector<tune::TuneResult<Candidate, Entry>>& results,
                        int width) {
  fmt::print("\n{:<26} {:<20} {:<{}} {:>12} {:<{}} {:>10} {:>9}\n", "spec", "bucket",
             "heuristic", width, "heur. ms", "tuned", width, "tuned ms", "speed-up");
  for (const auto& r : results)
    for (const auto& b : r.buckets)
      fmt::print("{:<26} {:<20} {:<{}} {:>12.4f} {:<{}} {:>10.4f} {:>8.2f}x\n",
                 tune::spec_summary(r.spec), tune::describe(b.bucket),
                 tune::candidate_label(b.tiles.heuristic), width, b.tiles.heuristic_ms,
                 tune::candidate_label(b.tiles.best), width, b.tiles.best_ms,
                 speed_up(b.tiles.heuristic_ms, b.tiles.best_ms));
  for (const auto& r : results)
    fmt::print("{}: {} candidates ({} pruned, {} dropped) in {:.1f} s{}\n", r.spec.name,
               r.candidates, r.pruned, r.dropped.size(), r.seconds,
               r.budget_exhausted ? " (budget spent before every candidate was timed)" : "");
}

// A backward step's tiles in the DB's table: the path it was tuned for, and the tiles.
std::string step_label(const std::string& path, const Tiles& tiles) {
  return path + " " + tune::tiles_label(tiles);
}

}  // namespace

void print_db(const tune::TuneDb& db) {
  const tune::TuneDbEntries entries = db.load();
  const size_t total = entries.tiles.size() + entries.decode.size() + entries.backward.size();
  fmt::print("tune DB {}: {} entr{}\n", db.path(), total, total == 1 ? "y" : "ies");
  if (!entries.tiles.empty()) {
    fmt::print("{:<26} {:<20} {:<14} {:>12} {:>14} {:>9}  {:<20} {}\n", "spec", "bucket",
               "tiles", "tuned ms", "heuristic ms", "speed-up", "tuned at", "gpu");
    for (const tune::TuneEntry& e : entries.tiles)
      fmt::print("{:<26} {:<20} {:<14} {:>12.4f} {:>14.4f} {:>8.2f}x  {:<20} {}\n",
                 e.spec_summary, tune::describe(e.bucket), tune::tiles_label(e.tiles), e.tuned_ms,
                 e.heuristic_ms, speed_up(e.heuristic_ms, e.tuned_ms), e.tuned_at,
                 tune::describe(e.gpu));
  }
  if (!entries.backward.empty()) {
    fmt::print("{}backward tiles (each step's path and tiles; times of the whole backward)\n",
               entries.tiles.empty() ? "" : "\n");
    fmt::print("{:<26} {:<20} {:<28} {:<28} {:>12} {:>14} {:>9}  {:<20} {}\n", "spec", "bucket",
               "dK/dV", "dQ", "tuned ms", "heuristic ms", "speed-up", "tuned at", "gpu");
    for (const tune::BackwardEntry& e : entries.backward)
      fmt::print("{:<26} {:<20} {:<28} {:<28} {:>12.4f} {:>14.4f} {:>8.2f}x  {:<20} {}\n",
                 e.spec_summary, tune::describe(e.bucket), step_label(e.dkdv_path, e.tiles.dkdv),
                 step_label(e.dq_path, e.tiles.dq), e.tuned_ms, e.heuristic_ms,
                 speed_up(e.heuristic_ms, e.tuned_ms), e.tuned_at, tune::describe(e.gpu));
  }
  if (!entries.decode.empty()) {
    fmt::print("{}decode key splits (\"heuristic\": none beat the heuristic's)\n",
               entries.tiles.empty() && entries.backward.empty() ? "" : "\n");
    fmt::print("{:<26} {:<20} {:>10} {:>10} {:>12} {:>14} {:>9}  {:<20} {}\n", "spec",
               "decode bucket", "splits", "heuristic", "tuned ms", "heuristic ms", "speed-up",
               "tuned at", "gpu");
    for (const tune::DecodeEntry& e : entries.decode)
      fmt::print("{:<26} {:<20} {:>10} {:>10} {:>12.4f} {:>14.4f} {:>8.2f}x  {:<20} {}\n",
                 e.spec_summary, tune::describe(e.bucket), splits_label(e.kv_splits, "heuristic"),
                 splits_label(e.heuristic_kv_splits, "-"), e.tuned_ms, e.heuristic_ms,
                 speed_up(e.heuristic_ms, e.tuned_ms), e.tuned_at, tune::describe(e.gpu));
  }
}

void print_results(const std::vector<tune::SpecTuneResult>& results) {
  print_tile_results(results, 14);
}

void print_results(const std::vector<tune::BackwardTuneResult>& results) {
  print_tile_results(results, 36);
}

void print_results(const std::vector<tune::DecodeTuneResult>& results) {
  fmt::print("\n{:<26} {:<22} {:<20} {:>9} {:>10} {:>6} {:>10} {:>9}\n", "spec", "shape",
             "decode bucket", "heuristic", "heur. ms", "tuned", "tuned ms", "speed-up");
  for (const tune::DecodeTuneResult& r : results)
    for (const tune::DecodeShapeResult& s : r.shapes)
      fmt::print("{:<26} {:<22} {:<20} {:>9} {:>10.4f} {:>6} {:>10.4f} {:>8.2f}x\n",
                 tune::spec_summary(r.spec), tune::describe(s.shape), tune::describe(s.bucket),
                 s.splits.heuristic, s.splits.heuristic_ms, s.splits.best, s.splits.best_ms,
                 speed_up(s.splits.heuristic_ms, s.splits.best_ms));
  for (const tune::DecodeTuneResult& r : results)
    fmt::print("{}: {} decode shapes timed ({} left out) in {:.1f} s{}\n", r.spec.name,
               r.shapes.size(), r.left_out.size(), r.seconds,
               r.budget_exhausted ? " (budget spent before every split count was timed)" : "");
}

}  // namespace flashjit::cli
