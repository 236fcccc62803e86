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

}  // namespace

void print_db(const tune::TuneDb& db) {
  const tune::TuneDbEntries entries = db.load();
  const size_t total = entries.tiles.size() + entries.decode.size();
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
  if (!entries.decode.empty()) {
    fmt::print("{}decode key splits (\"heuristic\": none beat the heuristic's)\n",
               entries.tiles.empty() ? "" : "\n");
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
  fmt::print("\n{:<26} {:<20} {:<14} {:>12} {:<14} {:>10} {:>9}\n", "spec", "bucket",
             "heuristic", "heur. ms", "tuned", "tuned ms", "speed-up");
  for (const tune::SpecTuneResult& r : results)
    for (const tune::BucketResult& b : r.buckets)
      fmt::print("{:<26} {:<20} {:<14} {:>12.4f} {:<14} {:>10.4f} {:>8.2f}x\n",
                 tune::spec_summary(r.spec), tune::describe(b.bucket),
                 tune::tiles_label(b.tiles.heuristic), b.tiles.heuristic_ms,
                 tune::tiles_label(b.tiles.best), b.tiles.best_ms,
                 b.tiles.heuristic_ms / b.tiles.best_ms);
  for (const tune::SpecTuneResult& r : results)
    fmt::print("{}: {} candidates ({} pruned, {} dropped) in {:.1f} s{}\n", r.spec.name,
               r.candidates, r.pruned, r.dropped.size(), r.seconds,
               r.budget_exhausted ? " (budget spent before every candidate was timed)" : "");
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
