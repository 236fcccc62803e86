// `flashjit tune SPEC.yaml... [--seqlens 1024,4096,16384] [--batch-heads N] [--budget-s S]
// [--db FILE]`: find the fastest correct tiles per spec and shape bucket on this GPU and
// record them in the tune DB; `flashjit tune --show` prints what the DB holds.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "autotune/candidates.h"
#include "autotune/tuner.h"
#include "runtime/driver.h"
#include "runtime/tune_db.h"
#include "tools/tune_command.h"

namespace flashjit::cli {
namespace {

struct TuneCommandOptions {
  std::vector<std::string> spec_files;
  std::vector<int> seqlens = {1024, 4096, 16384};
  std::optional<int> batch_heads;
  double budget_s = 0;
  std::string db;
  bool show = false;
};

void print_db(const tune::TuneDb& db) {
  const std::vector<tune::TuneEntry> entries = db.load().tiles;
  fmt::print("tune DB {}: {} entr{}\n", db.path(), entries.size(),
             entries.size() == 1 ? "y" : "ies");
  if (entries.empty()) return;
  fmt::print("{:<26} {:<20} {:<14} {:>12} {:>14} {:>9}  {:<20} {}\n", "spec", "bucket", "tiles",
             "tuned ms", "heuristic ms", "speed-up", "tuned at", "gpu");
  for (const tune::TuneEntry& e : entries)
    fmt::print("{:<26} {:<20} {:<14} {:>12.4f} {:>14.4f} {:>8.2f}x  {:<20} {}\n", e.spec_summary,
               tune::describe(e.bucket), tune::tiles_label(e.tiles), e.tuned_ms, e.heuristic_ms,
               e.tuned_ms > 0 ? e.heuristic_ms / e.tuned_ms : 0.0, e.tuned_at,
               tune::describe(e.gpu));
}

void print_table(const std::vector<tune::SpecTuneResult>& results) {
  fmt::print("\n{:<26} {:<20} {:<14} {:>12} {:<14} {:>10} {:>9}\n", "spec", "bucket",
             "heuristic", "heur. ms", "tuned", "tuned ms", "speed-up");
  for (const tune::SpecTuneResult& r : results)
    for (const tune::BucketResult& b : r.buckets)
      fmt::print("{:<26} {:<20} {:<14} {:>12.4f} {:<14} {:>10.4f} {:>8.2f}x\n",
                 tune::spec_summary(r.spec), tune::describe(b.bucket),
                 tune::tiles_label(b.heuristic_tiles), b.heuristic_ms,
                 tune::tiles_label(b.best_tiles), b.best_ms, b.heuristic_ms / b.best_ms);
  for (const tune::SpecTuneResult& r : results)
    fmt::print("{}: {} candidates ({} pruned, {} dropped) in {:.1f} s{}\n", r.spec.name,
               r.candidates, r.pruned, r.dropped.size(), r.seconds,
               r.budget_exhausted ? " (budget spent before every candidate was timed)" : "");
}

int run_tune(const TuneCommandOptions& o) {
  const tune::TuneDb db(o.db.empty() ? tune::default_db_path() : o.db);
  if (o.show) {
    print_db(db);
    return kOk;
  }
  if (o.spec_files.empty()) throw Error(ErrorKind::Usage, "tune needs SPEC.yaml files (or --show)");
  std::vector<Spec> specs;
  for (const std::string& file : o.spec_files) specs.push_back(Spec::from_file(file));
  if (!rt::Driver::available())
    throw Error(ErrorKind::NoDevice,
                fmt::format("tuning times kernels on a GPU and this machine has none ({}); "
                            "tune on the GPU the kernels will run on, then ship its tune DB",
                            rt::Driver::unavailable_reason()));

  tune::TuneOptions options;
  options.seqlens = o.seqlens;
  options.batch_heads = o.batch_heads;
  options.timing.budget_s = o.budget_s;
  Runtime runtime;
  std::vector<tune::SpecTuneResult> results;
  for (const Spec& spec : specs) {
    results.push_back(tune::tune_spec(runtime, spec, options, [](const std::string& line) {
      fmt::print("{}\n", line);
      std::fflush(stdout);
    }));
    // Recorded spec by spec, so an interrupted run keeps what it measured.
    db.record(results.back().entries);
    fmt::print("recorded {} entr{} in {}\n", results.back().entries.size(),
               results.back().entries.size() == 1 ? "y" : "ies", db.path());
  }
  print_table(results);
  return kOk;
}

}  // namespace

Command add_tune_command(CLI::App& parent) {
  auto o = std::make_shared<TuneCommandOptions>();
  CLI::App* app = parent.add_subcommand(
      "tune",
      "Find the fastest correct tiles per spec and shape bucket on this GPU and record them in "
      "the tune DB (FLASHJIT_TUNE_DB, else <cache dir>/tune.json); exit 3 without a GPU");
  app->add_option("specs", o->spec_files, "spec files (YAML)")->check(CLI::ExistingFile);
  app->add_option("--seqlens", o->seqlens, "sequence lengths to tune (seqlen_q = seqlen_k)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app->add_option("--batch-heads", o->batch_heads,
                  "batch x heads of the timed shapes (default: 16k tokens, batch = 16384 / "
                  "seqlen, heads = 2048 / head_dim_qk)")
      ->check(CLI::PositiveNumber);
  app->add_option("--budget-s", o->budget_s,
                  "seconds per spec after which untimed candidates are skipped (0: none)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--db", o->db, "tune DB file (default: FLASHJIT_TUNE_DB, else <cache dir>/tune.json)");
  app->add_flag("--show", o->show, "print the tune DB and exit");
  return {app, [o] { return run_tune(*o); }};
}

}  // namespace flashjit::cli
