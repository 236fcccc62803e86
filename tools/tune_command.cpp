// `flashjit tune SPEC.yaml... [--backward] [--seqlens 1024,4096,16384] [--batch-heads N]
// [--budget-s S] [--db FILE]`: find the fastest correct tiles per spec and shape bucket on
// this GPU (with --backward, the backward's dK/dV and dQ tiles) and record them in the tune DB;
// with `--decode [--batches B,...] [--seqlens-k L,...] [--seqlen-q N] [--heads H]
// [--heads-kv H]`, the fastest key-split count per decode bucket instead; `flashjit tune
// --show` prints what the DB holds.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "autotune/backward_tuner.h"
#include "autotune/candidates.h"
#include "autotune/decode_tuner.h"
#include "autotune/tuner.h"
#include "runtime/driver.h"
#include "runtime/tune_db.h"
#include "tools/tune_command.h"
#include "tools/tune_tables.h"

namespace flashjit::cli {
namespace {

struct TuneCommandOptions {
  std::vector<std::string> spec_files;
  std::vector<int> seqlens = {1024, 4096, 16384};
  std::optional<int> batch_heads;
  bool decode = false;
  bool backward = false;
  tune::DecodeTuneOptions decode_options;
  double budget_s = 0;
  std::string db;
  bool show = false;
};

void print_line(const std::string& line) {
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

// Tunes each spec with `tune_one` and records its entries, spec by spec, so an interrupted run
// keeps what it measured; then prints the results.
template <class Tune>
void tune_each(const std::vector<Spec>& specs, const tune::TuneDb& db, Tune tune_one) {
  std::vector<decltype(tune_one(specs.front()))> results;
  for (const Spec& spec : specs) {
    results.push_back(tune_one(spec));
    db.record(results.back().entries);
    fmt::print("recorded {} entr{} in {}\n", results.back().entries.size(),
               results.back().entries.size() == 1 ? "y" : "ies", db.path());
  }
  print_results(results);
}

int run_tune(TuneCommandOptions& o) {
  const tune::TuneDb db(o.db.empty() ? tune::default_db_path() : o.db);
  if (o.show) {
    print_db(db);
    return kOk;
  }
  if (o.spec_files.empty()) throw Error(ErrorKind::Usage, "tune needs SPEC.yaml files (or --show)");
  std::vector<Spec> specs;
  for (const std::string& file : o.spec_files) specs.push_back(Spec::from_file(file));
  // Specs and shapes that cannot be tuned are the user's to fix, with or without a GPU.
  for (const Spec& spec : specs) {
    if (o.decode)
      tune::decode_shapes(spec, o.decode_options);
    else
      tune::check_tunable(spec, o.backward);
  }
  if (!rt::Driver::available())
    throw Error(ErrorKind::NoDevice,
                fmt::format("tuning times kernels on a GPU and this machine has none ({}); "
                            "tune on the GPU the kernels will run on, then ship its tune DB",
                            rt::Driver::unavailable_reason()));

  Runtime runtime;
  if (o.decode) {
    o.decode_options.timing.budget_s = o.budget_s;
    tune_each(specs, db, [&](const Spec& spec) {
      return tune::tune_decode(runtime, spec, o.decode_options, print_line);
    });
    return kOk;
  }
  tune::TuneOptions options;
  options.seqlens = o.seqlens;
  options.batch_heads = o.batch_heads;
  options.timing.budget_s = o.budget_s;
  if (o.backward) {
    tune_each(specs, db, [&](const Spec& spec) {
      return tune::tune_backward(0, spec, options, print_line);  // Runtime's default GPU
    });
    return kOk;
  }
  tune_each(specs, db, [&](const Spec& spec) {
    return tune::tune_spec(runtime, spec, options, print_line);
  });
  return kOk;
}

}  // namespace

Command add_tune_command(CLI::App& parent) {
  auto o = std::make_shared<TuneCommandOptions>();
  CLI::App* app = parent.add_subcommand(
      "tune",
      "Find the fastest correct tiles per spec and shape bucket on this GPU (with --backward: "
      "the backward's dK/dV and dQ tiles; with --decode: decode's fastest key-split count per "
      "decode bucket) and record them in the tune DB (FLASHJIT_TUNE_DB, else <cache "
      "dir>/tune.json); exit 3 without a GPU");
  app->add_option("specs", o->spec_files, "spec files (YAML)")->check(CLI::ExistingFile);
  CLI::Option* decode = app->add_flag(
      "--decode", o->decode,
      "tune decode's key-split counts instead of tiles, on every --batches x --seqlens-k shape "
      "(K and V over 24 GiB left out)");
  app->add_flag("--backward", o->backward,
                "tune the backward's tiles instead: its dK/dV step's grid, then its dQ step's, "
                "each candidate timed as the whole backward after a forward for O and LSE")
      ->excludes(decode);
  app->add_option("--seqlens", o->seqlens, "sequence lengths to tune (seqlen_q = seqlen_k)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->excludes(decode);
  app->add_option("--batch-heads", o->batch_heads,
                  "batch x heads of the timed shapes (default: 16k tokens, batch = 16384 / "
                  "seqlen, heads = 2048 / head_dim_qk)")
      ->check(CLI::PositiveNumber)
      ->excludes(decode);
  tune::DecodeTuneOptions& d = o->decode_options;
  app->add_option("--batches", d.batches, "decode batch sizes")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->needs(decode);
  app->add_option("--seqlens-k", d.seqlens_k, "decode KV cache lengths")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->needs(decode);
  app->add_option("--seqlen-q", d.seqlen_q, "decode's new query rows a call")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->needs(decode);
  app->add_option("--heads", d.heads_q, "decode's query heads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->needs(decode);
  app->add_option("--heads-kv", d.heads_kv,
                  "decode's KV heads (--heads / --heads-kv is the GQA group)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->needs(decode);
  app->add_option("--budget-s", o->budget_s,
                  "seconds per spec after which untimed candidates are skipped (0: none)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--db", o->db, "tune DB file (default: FLASHJIT_TUNE_DB, else <cache dir>/tune.json)");
  app->add_flag("--show", o->show,
                "print the tune DB (forward and backward tiles, decode entries) and exit")
      ->excludes(decode)
      ->excludes("--backward");
  return {app, [o] { return run_tune(*o); }};
}

}  // namespace flashjit::cli
