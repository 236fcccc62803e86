// The `flashjit` program as a user meets it: subcommands, output formats and exit codes.
// Runs the built binary (FLASHJIT_CLI_PATH) through the shell with a private cache folder.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/tune_db.h"
#include "verify/npy.h"

namespace {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A scratch folder per test with its own FLASHJIT_CACHE_DIR, removed at the end.
class Scratch {
 public:
  Scratch() {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("flashjit_test_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  ~Scratch() { fs::remove_all(dir_); }

  fs::path path(const std::string& name) const { return dir_ / name; }

  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }

  // Runs `flashjit ARGS...`; arguments are single-quoted for the shell.
  CliResult run(const std::vector<std::string>& args) const {
    std::string command = "FLASHJIT_CACHE_DIR='" + (dir_ / "cache").string() + "' '" +
                          std::string(FLASHJIT_CLI_PATH) + "'";
    for (const std::string& arg : args) command += " '" + arg + "'";
    command += " >'" + path("stdout").string() + "' 2>'" + path("stderr").string() + "'";
    const int status = std::system(command.c_str());
    CliResult result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = slurp(path("stdout"));
    result.err = slurp(path("stderr"));
    return result;
  }

 private:
  fs::path dir_;
};

const char* kGoodSpec = R"(name: cli_hd64_causal
head_dim: 64
dtype: fp16
causal: true
mask: none
arch: sm80
hopper: {warp_specialization: false}
tiles: auto
)";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("cli: --help lists every subcommand, and each has its own --help") {
  Scratch scratch;
  const CliResult help = scratch.run({"--help"});
  CHECK(help.exit_code == 0);
  for (const char* command :
       {"check", "gen", "compile", "run", "cache", "build", "tune", "bench"}) {
    CHECK_MESSAGE(contains(help.out, command), help.out);
    const CliResult sub = scratch.run({command, "--help"});
    CHECK_MESSAGE(sub.exit_code == 0, command);
    CHECK(contains(sub.out, "Usage"));
  }
  CHECK(scratch.run({}).exit_code == 2);  // no subcommand
  CHECK(scratch.run({"frobnicate"}).exit_code == 2);
}

TEST_CASE("cli: check prints the resolved spec, or the error with file:line:column (exit 2)") {
  Scratch scratch;
  const fs::path good = scratch.write("good.yaml", kGoodSpec);
  const CliResult ok = scratch.run({"check", good.string()});
  CHECK(ok.exit_code == 0);
  CHECK_MESSAGE(contains(ok.out, "head_dim_qk: 64"), ok.out);
  CHECK(contains(ok.out, "causal: true"));

  const fs::path bad =
      scratch.write("bad.yaml", "name: typo\nhead_dim: 64\ncasual: true\n");
  const CliResult error = scratch.run({"check", bad.string()});
  CHECK(error.exit_code == 2);
  CHECK_MESSAGE(std::regex_search(error.err, std::regex("bad\\.yaml:[0-9]+:[0-9]+")), error.err);
  CHECK(contains(error.err, "flashjit: error:"));
  CHECK(contains(error.err, "casual"));

  CHECK(scratch.run({"check", scratch.path("missing.yaml").string()}).exit_code == 2);
}

TEST_CASE("cli: check says which kernel each target gets, and refuses tiles a target cannot run "
          "at tiles: (exit 2)") {
  Scratch scratch;
  // arch: sm80 allows every target, and each runs the sm80 kernel.
  const CliResult ok = scratch.run({"check", scratch.write("good.yaml", kGoodSpec).string()});
  CHECK(ok.exit_code == 0);
  for (const char* target : {"sm_80", "sm_86", "sm_89", "sm_90a"})
    CHECK_MESSAGE(contains(ok.out, std::string("# ") + target + ": sm80 kernel, tiles "), ok.out);

  // The sm90 kernel's tiles: sm_90a runs them, the sm80 kernel of the other targets cannot.
  const fs::path sm90 = scratch.write(
      "sm90.yaml", "name: sm90_tiles\nhead_dim: 128\n"
                   "tiles: {block_m: 128, block_n: 128, warps: 12, stages: 3}\n");
  const CliResult partial = scratch.run({"check", sm90.string()});
  CHECK(partial.exit_code == 2);
  CHECK_MESSAGE(contains(partial.out, "head_dim_qk: 128"), partial.out);  // still printed
  CHECK(contains(partial.out, "# sm_90a: sm90 kernel, tiles ws_n128s3"));
  CHECK(contains(partial.out, "# sm_80: no kernel (see the error)"));
  CHECK_MESSAGE(contains(partial.err, "sm90.yaml:3:8: tiles: the sm80 kernel, which sm_80 runs, "
                                      "cannot run them"),
                partial.err);
  CHECK(scratch.run({"check", sm90.string(), "--arch", "sm_90a"}).exit_code == 0);

  // gen and compile refuse the same tiles at the same place, before planning.
  const CliResult gen = scratch.run({"gen", sm90.string(), "--arch", "sm_86"});
  CHECK(gen.exit_code == 2);
  CHECK_MESSAGE(contains(gen.err, "sm90.yaml:3:8: tiles: the sm80 kernel, which sm_86 runs"),
                gen.err);
  const CliResult compile = scratch.run({"compile", sm90.string(), "--arch", "sm_80"});
  CHECK(compile.exit_code == 2);
  CHECK(contains(compile.err, "sm90.yaml:3:8: tiles:"));
}

TEST_CASE("cli: gen prints the CUDA source, or writes it with -o") {
  Scratch scratch;
  const fs::path spec = scratch.write("spec.yaml", kGoodSpec);
  const CliResult source = scratch.run({"gen", spec.string(), "--arch", "sm_90a"});
  CHECK(source.exit_code == 0);
  CHECK_MESSAGE(contains(source.out, "extern \"C\" __global__"), source.err);

  const fs::path file = scratch.path("kernel.cu");
  CHECK(scratch.run({"gen", spec.string(), "-o", file.string()}).exit_code == 0);
  CHECK(contains(slurp(file), "extern \"C\" __global__"));

  CHECK(scratch.run({"gen", spec.string(), "--arch", "sm_70"}).exit_code == 2);
}

TEST_CASE("cli: compile --json reports one object per kernel; the second run hits the cache") {
  Scratch scratch;
  const fs::path spec = scratch.write("spec.yaml", kGoodSpec);
  for (const bool expect_hit : {false, true}) {
    const CliResult result = scratch.run({"compile", spec.string(), "--arch", "sm_80", "--json"});
    REQUIRE_MESSAGE(result.exit_code == 0, result.err);
    const nlohmann::json report = nlohmann::json::parse(result.out);
    for (const char* field :
         {"kernel_name", "spec", "target", "tiles", "registers", "shared_bytes",
          "spill_store_bytes", "spill_load_bytes", "stack_bytes", "compile_ms", "cache_hit",
          "cache_file"})
      CHECK_MESSAGE(report.contains(field), field);
    CHECK(report["tiles"]["block_m"].get<int>() > 0);
    CHECK(report["target"] == "sm_80");
    CHECK(report["spill_store_bytes"] == 0);
    CHECK(report["cache_hit"] == expect_hit);
    CHECK(report["registers"].get<int>() > 0);
  }
  // The table form names the kernel.
  const CliResult table = scratch.run({"compile", spec.string()});
  CHECK(table.exit_code == 0);
  CHECK(contains(table.out, "fa_fwd_qk64_v64_fp16"));
}

TEST_CASE("cli: compile exits 2 for a bad spec among good ones") {
  Scratch scratch;
  const fs::path good = scratch.write("good.yaml", kGoodSpec);
  const fs::path bad = scratch.write("bad.yaml", "name: x\nhead_dim: 513\n");
  const CliResult result = scratch.run({"compile", good.string(), bad.string(), "--json"});
  CHECK(result.exit_code == 2);
  CHECK(contains(result.err, "bad.yaml"));
  CHECK(contains(result.out, "\"kernel_name\""));  // the good one was still compiled
}

TEST_CASE("cli: run without a GPU exits 3 and says compile works without one") {
  Scratch scratch;
  const fs::path spec = scratch.write("spec.yaml", kGoodSpec);
  const CliResult result = scratch.run({"run", spec.string(), "--batch", "1", "--heads", "2",
                                        "--seqlen-q", "17", "--seqlen-k", "33"});
  if (result.exit_code != 3) {
    MESSAGE("a GPU is present: run returned ", result.exit_code, "; the no-GPU path is untested");
    return;
  }
  CHECK(contains(result.err, "no GPU"));
  CHECK(contains(result.err, "flashjit compile"));
  // Missing shape options are a usage error, GPU or not.
  CHECK(scratch.run({"run", spec.string(), "--batch", "1"}).exit_code == 2);
}

TEST_CASE("cli: run checks the shape before it asks for a GPU (a bad one exits 2 anywhere)") {
  Scratch scratch;
  const fs::path spec = scratch.write("spec.yaml", kGoodSpec);
  for (const bool backward : {false, true}) {
    std::vector<std::string> args = {"run",      spec.string(), "--batch",    "1",
                                     "--heads",  "3",           "--heads-kv", "2",
                                     "--seqlen-q", "17",        "--seqlen-k", "33"};
    if (backward) args.push_back("--backward");
    const CliResult result = scratch.run(args);
    CHECK(result.exit_code == 2);
    CHECK_MESSAGE(contains(result.err, "heads_q a multiple of heads_kv"), result.err);
  }
}

TEST_CASE("cli: run --backward: help, options, no-GPU exit, do.npy checked against q.npy") {
  using flashjit::verify::write_npy_f32;
  Scratch scratch;
  const CliResult help = scratch.run({"run", "--help"});
  CHECK(contains(help.out, "--backward"));
  CHECK(contains(help.out, "do.npy"));
  CHECK(contains(help.out, "dq.npy"));
  const fs::path spec = scratch.write("spec.yaml", kGoodSpec);
  const std::vector<std::string> shape = {"--batch", "1", "--heads", "2", "--seqlen-q", "17",
                                          "--seqlen-k", "33"};
  std::vector<std::string> args = {"run", spec.string(), "--deterministic-runs", "3"};
  args.insert(args.end(), shape.begin(), shape.end());
  CHECK(scratch.run(args).exit_code == 2);  // --deterministic-runs needs --backward
  args.push_back("--backward");
  const CliResult no_gpu = scratch.run(args);
  if (no_gpu.exit_code != 3) {
    MESSAGE("a GPU is present: run --backward returned ", no_gpu.exit_code,
            "; the no-GPU path is untested");
    return;
  }
  CHECK(contains(no_gpu.err, "no GPU"));

  const fs::path dir = scratch.path("inputs");
  fs::create_directories(dir);
  const auto write = [&](const char* name, std::vector<int64_t> dims) {
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    write_npy_f32((dir / name).string(), dims, std::vector<float>(count, 0.5f));
  };
  write("q.npy", {2, 17, 4, 64});
  write("k.npy", {2, 33, 2, 64});
  write("v.npy", {2, 33, 2, 64});
  write("do.npy", {2, 17, 4, 64});
  CHECK(scratch.run({"run", spec.string(), "--inputs", dir.string(), "--backward"}).exit_code ==
        3);
  write("do.npy", {2, 16, 4, 64});
  const CliResult seqlen =
      scratch.run({"run", spec.string(), "--inputs", dir.string(), "--backward"});
  CHECK(seqlen.exit_code == 2);
  CHECK_MESSAGE(contains(seqlen.err, "do.npy: seqlen (dimension 1) is 16"), seqlen.err);
  // The forward reads no do.npy.
  CHECK(scratch.run({"run", spec.string(), "--inputs", dir.string()}).exit_code == 3);
}

TEST_CASE("cli: run --inputs checks the arrays against the spec and each other") {
  using flashjit::verify::write_npy_f32;
  Scratch scratch;
  const fs::path spec = scratch.write("spec.yaml", kGoodSpec);
  const fs::path dir = scratch.path("inputs");
  fs::create_directories(dir);
  const auto write = [&](const char* name, std::vector<int64_t> shape) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    write_npy_f32((dir / name).string(), shape, std::vector<float>(count, 0.5f));
  };
  write("q.npy", {2, 17, 4, 64});
  write("k.npy", {2, 33, 2, 64});
  write("v.npy", {2, 33, 2, 64});
  const CliResult fits = scratch.run({"run", spec.string(), "--inputs", dir.string()});
  CHECK(fits.exit_code != 2);  // 3 without a GPU, 0 with one

  write("v.npy", {2, 32, 2, 64});
  const CliResult seqlen = scratch.run({"run", spec.string(), "--inputs", dir.string()});
  CHECK(seqlen.exit_code == 2);
  CHECK_MESSAGE(contains(seqlen.err, "v.npy: seqlen (dimension 1) is 32"), seqlen.err);

  write("v.npy", {2, 33, 2, 64});
  write("k.npy", {2, 33, 2, 100});
  const CliResult dim = scratch.run({"run", spec.string(), "--inputs", dir.string()});
  CHECK(dim.exit_code == 2);
  CHECK_MESSAGE(contains(dim.err, "k.npy: head_dim (dimension 3) is 100"), dim.err);

  CHECK(scratch.run({"run", spec.string(), "--inputs", dir.string(), "--batch", "2"})
            .exit_code == 2);  // shapes come from the arrays
}

TEST_CASE("cli: tune --decode checks its flags and shapes before it asks for a GPU") {
  Scratch scratch;
  const fs::path spec = scratch.write("spec.yaml", kGoodSpec);
  const CliResult help = scratch.run({"tune", "--help"});
  CHECK(help.exit_code == 0);
  for (const char* flag : {"--decode", "--batches", "--seqlens-k", "--seqlen-q", "--heads-kv"})
    CHECK_MESSAGE(contains(help.out, flag), flag);
  CHECK(contains(help.out, "=[1,16,128]"));

  const auto refused = [&](std::vector<std::string> args, const std::string& why) {
    args.insert(args.begin(), {"tune", spec.string()});
    const CliResult result = scratch.run(args);
    CHECK(result.exit_code == 2);
    CHECK_MESSAGE(contains(result.err, why), result.err);
  };
  refused({"--batches", "1"}, "--batches requires --decode");
  refused({"--heads-kv", "2"}, "--heads-kv requires --decode");
  refused({"--decode", "--seqlens", "1024"}, "--decode excludes --seqlens");
  refused({"--decode", "--batch-heads", "64"}, "--decode excludes --batch-heads");
  refused({"--decode", "--show"}, "--decode excludes --show");
  refused({"--decode", "--heads", "32", "--heads-kv", "5"},
          "--heads 32 must be a positive multiple of --heads-kv 5");
  refused({"--decode", "--seqlen-q", "64"}, "runs the forward kernel, not decode's");
  refused({"--decode", "--seqlens-k", "100"}, "b1 h32/8 q1 k100");

  const CliResult result = scratch.run({"tune", spec.string(), "--decode", "--batches", "1",
                                        "--seqlens-k", "4096", "--db",
                                        scratch.path("tune.json").string()});
  if (result.exit_code != 3) {
    MESSAGE("a GPU is present: tune --decode returned ", result.exit_code,
            "; the no-GPU path is untested");
    return;
  }
  CHECK(contains(result.err, "has none"));
}

TEST_CASE("cli: tune --show lists decode entries beside tile entries") {
  Scratch scratch;
  const std::string db = scratch.path("tune.json").string();
  flashjit::tune::TuneEntry tiles;
  tiles.gpu = flashjit::tune::GpuIdentity{"NVIDIA H200", 9, 0, 132, 13000, "13.0"};
  tiles.spec_hash = "abc";
  tiles.bucket = {4096, 4096, 64};
  tiles.target = "sm_90a";
  tiles.tiles = flashjit::Tiles{128, 128, 12, 2};
  flashjit::tune::DecodeEntry tuned;
  tuned.gpu = tiles.gpu;
  tuned.spec_hash = "abc";
  tuned.spec_summary = "bf16 qk64 v64 full";
  tuned.bucket = {4, 32768, 128};
  tuned.kv_splits = 24;
  tuned.heuristic_kv_splits = 32;
  tuned.tuned_ms = 0.5;
  tuned.heuristic_ms = 0.6;
  flashjit::tune::DecodeEntry kept = tuned;
  kept.bucket.seqlen_k = 4096;
  kept.kv_splits = 0;
  flashjit::tune::TuneDb(db).record({tiles});
  flashjit::tune::TuneDb(db).record({tuned, kept});
  const CliResult shown = scratch.run({"tune", "--show", "--db", db});
  CHECK(shown.exit_code == 0);
  CHECK(contains(shown.out, "3 entries"));
  CHECK(contains(shown.out, "m128n128w12s2"));
  CHECK(contains(shown.out, "decode key splits"));
  const std::regex tuned_row(R"(bf16 qk64 v64 full +r4 k32768 bhkv128 +24 +32 +0\.5000 +0\.6000 +1\.20x)");
  CHECK_MESSAGE(std::regex_search(shown.out, tuned_row), shown.out);
  const std::regex kept_row(R"(r4 k4096 bhkv128 +heuristic +32 )");
  CHECK_MESSAGE(std::regex_search(shown.out, kept_row), shown.out);
}

TEST_CASE("cli: tune --backward checks its flags and specs before it asks for a GPU") {
  Scratch scratch;
  const fs::path spec = scratch.write("spec.yaml", kGoodSpec);
  const CliResult help = scratch.run({"tune", "--help"});
  CHECK(help.exit_code == 0);
  CHECK(contains(help.out, "--backward"));
  CHECK(contains(help.out, "dK/dV"));

  const auto run = [&](const fs::path& file, std::vector<std::string> args) {
    args.insert(args.begin(), {"tune", file.string()});
    args.insert(args.end(), {"--db", scratch.path("tune.json").string()});
    return scratch.run(args);
  };
  const auto refused = [&](const fs::path& file, std::vector<std::string> args,
                           const std::string& why) {
    const CliResult result = run(file, std::move(args));
    CHECK(result.exit_code == 2);
    CHECK_MESSAGE(contains(result.err, why), result.err);
  };
  refused(spec, {"--backward", "--decode"}, "--decode excludes --backward");
  refused(spec, {"--backward", "--show"}, "--backward excludes --show");
  refused(spec, {"--backward", "--batches", "1"}, "--batches requires --decode");
  refused(spec, {"--backward", "--seqlens", "0"}, "--seqlens");
  const fs::path sparse = scratch.write(
      "sparse.yaml",
      "name: sparse\nhead_dim: 64\nmask: {block_sparse: {block_q: 128, block_k: 128}}\n");
  refused(sparse, {"--backward"}, "leave the backward's tiles to the heuristic");
  // A spec's own tiles are the forward's: they stop `tune`, not `tune --backward`.
  const fs::path fixed = scratch.write(
      "fixed.yaml",
      "name: fixed\nhead_dim: 64\ntiles: {block_m: 64, block_n: 64, warps: 4, stages: 2}\n");
  refused(fixed, {}, "fixes its tiles");

  const CliResult result = run(fixed, {"--backward", "--seqlens", "1024"});
  if (result.exit_code != 3) {
    MESSAGE("a GPU is present: tune --backward returned ", result.exit_code,
            "; the no-GPU path is untested");
    return;
  }
  CHECK(contains(result.err, "has none"));
  CHECK_FALSE(fs::exists(scratch.path("tune.json")));
}

TEST_CASE("cli: tune --show lists backward entries with each step's path and tiles") {
  Scratch scratch;
  const std::string db = scratch.path("tune.json").string();
  flashjit::tune::BackwardEntry e;
  e.gpu = flashjit::tune::GpuIdentity{"NVIDIA H200", 9, 0, 132, 13000, "13.0"};
  e.spec_hash = "abc";
  e.spec_summary = "bf16 qk64 v64 full";
  e.bucket = {16384, 16384, 32};
  e.target = "sm_90a";
  e.dkdv_path = "bwd_dkdv_sm90";
  e.dq_path = "bwd_dq_sm90";
  e.tiles = {flashjit::Tiles{96, 128, 12, 2}, flashjit::Tiles{128, 96, 12, 2}};
  e.tuned_ms = 7.8;
  e.heuristic_ms = 9.36;
  flashjit::tune::TuneDb(db).record({e});
  const CliResult shown = scratch.run({"tune", "--show", "--db", db});
  CHECK(shown.exit_code == 0);
  CHECK(contains(shown.out, "1 entry"));
  CHECK(contains(shown.out, "backward tiles"));
  const std::regex row(R"(bf16 qk64 v64 full +q16384 k16384 bh32 +bwd_dkdv_sm90 m96n128w12s2 )"
                       R"(+bwd_dq_sm90 m128n96w12s2 +7\.8000 +9\.3600 +1\.20x)");
  CHECK_MESSAGE(std::regex_search(shown.out, row), shown.out);
}

TEST_CASE("cli: cache info and clear") {
  Scratch scratch;
  const fs::path spec = scratch.write("spec.yaml", kGoodSpec);
  const CliResult empty = scratch.run({"cache", "info"});
  CHECK(empty.exit_code == 0);
  CHECK(contains(empty.out, (scratch.path("cache")).string()));
  CHECK(contains(empty.out, "entries: 0"));

  REQUIRE(scratch.run({"compile", spec.string(), "--arch", "sm_80"}).exit_code == 0);
  CHECK(contains(scratch.run({"cache", "info"}).out, "entries: 1"));
  const CliResult cleared = scratch.run({"cache", "clear"});
  CHECK(cleared.exit_code == 0);
  CHECK(contains(cleared.out, "removed 1 cached kernel"));
  CHECK(contains(scratch.run({"cache", "info"}).out, "entries: 0"));
  CHECK(scratch.run({"cache"}).exit_code == 2);
}
