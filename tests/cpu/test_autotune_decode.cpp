// The decode tuner's logic without a GPU: the shapes it times (and those it leaves out or
// refuses), the split counts it tries, and `flashjit tune --decode`'s flags and `--show`.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "autotune/decode_tuner.h"
#include "runtime/driver.h"
#include "runtime/tune_db.h"
#include "tests/cpu/runtime_test_support.h"

namespace flashjit::tune {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string usage_error(const Spec& spec, const DecodeTuneOptions& options) {
  try {
    decode_shapes(spec, options);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Usage);
    return e.what();
  }
  return "";
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

CliRun run_cli(const test::TempDir& dir, const std::string& args) {
  const std::string out = (dir.path() / "out").string(), err = (dir.path() / "err").string();
  const std::string command = "FLASHJIT_CACHE_DIR='" + (dir.path() / "cache").string() + "' '" +
                              FLASHJIT_CLI_PATH + "' " + args + " >'" + out + "' 2>'" + err + "'";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

}  // namespace

TEST_CASE("autotune decode: the default grid, less what is too large or already bucketed") {
  const Spec spec = test::spec_of(128, 128);
  const DecodeShapes shapes = decode_shapes(spec, DecodeTuneOptions{});
  // 3 batches x 3 cache lengths; b128 x 131072 keys x 8 KV heads x d128 is 64 GiB of K and V.
  CHECK(shapes.shapes.size() == 8);
  REQUIRE(shapes.left_out.size() == 1);
  CHECK(contains(shapes.left_out[0], "b128 h32/8 q1 k131072: K and V hold 64.0 GiB"));
  CHECK(describe(shapes.shapes[0]) == "b1 h32/8 q1 k4096");

  DecodeTuneOptions same_bucket;
  same_bucket.batches = {9, 16};
  same_bucket.seqlens_k = {4096};
  const DecodeShapes deduplicated = decode_shapes(spec, same_bucket);
  CHECK(deduplicated.shapes.size() == 1);
  REQUIRE(deduplicated.left_out.size() == 1);
  CHECK(contains(deduplicated.left_out[0], "b16 h32/8 q1 k4096: its bucket r4 k4096 bhkv128 is "
                                           "timed already"));
}

TEST_CASE("autotune decode: shapes that do not run the decode kernels are refused before any GPU") {
  const Spec spec = test::spec_of(128, 128);
  DecodeTuneOptions o;
  o.heads_kv = 5;
  CHECK(contains(usage_error(spec, o), "--heads 32 must be a positive multiple of --heads-kv 5"));
  o = {};
  o.seqlen_q = 17;  // 68 packed rows
  CHECK(contains(usage_error(spec, o), "runs the forward kernel, not decode's"));
  CHECK(contains(usage_error(spec, o), "here 68"));
  o = {};
  o.seqlens_k = {100};
  CHECK(contains(usage_error(spec, o), "b1 h32/8 q1 k100"));
  o = {};
  o.batches.clear();
  CHECK(contains(usage_error(spec, o), "no decode shapes to tune"));
  Spec never = spec;
  never.decode = DecodeMode::Never;
  CHECK(contains(usage_error(never, DecodeTuneOptions{}), "runs the forward kernel"));
  // decode: always takes any row count.
  Spec always = spec;
  always.decode = DecodeMode::Always;
  o = {};
  o.seqlen_q = 17;
  CHECK(usage_error(always, o).empty());
}

TEST_CASE("autotune decode: the heuristic's count first, then a spread up to what the call allows") {
  CHECK(kv_split_candidates({32, 128}) ==
        std::vector<int>{32, 1, 2, 3, 4, 6, 8, 12, 16, 24, 48, 64, 96, 128});
  CHECK(kv_split_candidates({5, 10}) == std::vector<int>{5, 1, 2, 3, 4, 6, 8, 10});
  CHECK(kv_split_candidates({1, 1}) == std::vector<int>{1});
}

TEST_CASE("autotune decode: `tune --decode` flags are checked; `tune --show` lists decode entries") {
  const test::TempDir dir;
  const std::string spec = std::string(FLASHJIT_SOURCE_DIR) + "/configs/hd64.yaml";
  const CliRun help = run_cli(dir, "tune --help");
  CHECK(help.exit_code == 0);
  for (const char* flag : {"--decode", "--batches", "--seqlens-k", "--seqlen-q", "--heads-kv"})
    CHECK_MESSAGE(contains(help.out, flag), flag);
  CHECK(contains(help.out, "=[1,16,128]"));

  CliRun r = run_cli(dir, "tune '" + spec + "' --batches 1");
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--batches requires --decode"));
  r = run_cli(dir, "tune '" + spec + "' --decode --seqlens 1024");
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--decode excludes --seqlens"));
  r = run_cli(dir, "tune '" + spec + "' --decode --heads 32 --heads-kv 5");
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--heads 32 must be a positive multiple of --heads-kv 5"));
  r = run_cli(dir, "tune '" + spec + "' --decode --seqlen-q 64");
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "runs the forward kernel"));

  const std::string db = (dir.path() / "tune.json").string();
  DecodeEntry e;
  e.gpu = GpuIdentity{"NVIDIA H200", 9, 0, 132, 13000, "13.0"};
  e.spec_hash = "abc";
  e.spec_summary = "bf16 qk64 v64 full";
  e.bucket = DecodeBucket{4, 32768, 128};
  e.kv_splits = 24;
  e.heuristic_kv_splits = 32;
  e.tuned_ms = 0.5;
  e.heuristic_ms = 0.6;
  DecodeEntry kept = e;
  kept.bucket.seqlen_k = 4096;
  kept.kv_splits = 0;
  TuneDb(db).record({e, kept});
  r = run_cli(dir, "tune --show --db '" + db + "'");
  CHECK(r.exit_code == 0);
  CHECK(contains(r.out, "2 entries"));
  CHECK(contains(r.out, "decode key splits"));
  CHECK(contains(r.out, "r4 k32768 bhkv128"));
  CHECK(contains(r.out, "1.20x"));
  CHECK(contains(r.out, "heuristic"));

  if (rt::Driver::available()) return;  // with a GPU, `tune --decode` would really tune
  r = run_cli(dir, "tune '" + spec + "' --decode --batches 1 --seqlens-k 4096 --db '" + db + "'");
  CHECK(r.exit_code == 3);
  CHECK(contains(r.err, "has none"));
}

}  // namespace flashjit::tune
