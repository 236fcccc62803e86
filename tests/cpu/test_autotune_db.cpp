// The tune DB file: format round trip, lookups that ignore other GPUs, corrupt files (readers
// report, writers set aside, a bad entry costs only itself), several processes recording at
// once, and the `flashjit tune` command without a GPU.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/driver.h"
#include "runtime/tune_db.h"
#include "tests/cpu/runtime_test_support.h"

namespace flashjit::tune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::slurp;

GpuIdentity h200() {
  return GpuIdentity{"NVIDIA H200", 9, 0, 132, 13000, "13.0"};
}

TuneEntry entry(const GpuIdentity& gpu, const std::string& hash, int seqlen, Tiles tiles) {
  TuneEntry e;
  e.gpu = gpu;
  e.spec_hash = hash;
  e.spec_summary = "bf16 qk128 v128 full";
  e.bucket = ShapeBucket{seqlen, seqlen, 64};
  e.target = "sm_90a";
  e.tiles = tiles;
  e.tuned_ms = 1.25;
  e.heuristic_ms = 1.5;
  e.heuristic_tiles = Tiles{128, 64, 8, 2};
  e.tuned_at = "2026-12-01T10:00:00Z";
  return e;
}

int count_with_prefix(const fs::path& dir, const std::string& prefix) {
  int n = 0;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

}  // namespace

TEST_CASE("autotune: a DB entry survives serialize and parse field for field") {
  const TuneEntry e = entry(h200(), "abc", 4096, Tiles{128, 128, 8, 3});
  const std::string text = serialize({{e}});
  CHECK(text.find("\"format\": \"flashjit-tune-db\"") != std::string::npos);
  CHECK(text.find("\"compute_capability\": \"9.0\"") != std::string::npos);
  const std::vector<TuneEntry> back = parse(text, "t.json").entries.tiles;
  REQUIRE(back.size() == 1);
  const TuneEntry& b = back[0];
  CHECK(b.gpu == e.gpu);
  CHECK(b.spec_hash == "abc");
  CHECK(b.spec_summary == e.spec_summary);
  CHECK(b.bucket == e.bucket);
  CHECK(b.target == "sm_90a");
  CHECK(b.tiles == e.tiles);
  CHECK(b.heuristic_tiles == e.heuristic_tiles);
  CHECK(b.tuned_ms == doctest::Approx(1.25));
  CHECK(b.heuristic_ms == doctest::Approx(1.5));
  CHECK(b.tuned_at == e.tuned_at);
}

TEST_CASE("autotune: parse names what is wrong in a file that is not a tune DB") {
  CHECK_THROWS_WITH_AS(parse("{", "x.json"), doctest::Contains("x.json"), Error);
  CHECK_THROWS_WITH_AS(parse("{\"entries\": []}", "x.json"), doctest::Contains("not a tune DB"),
                       Error);
  CHECK_THROWS_WITH_AS(parse("{\"format\": \"flashjit-tune-db\", \"version\": 7, \"entries\": []}", "x.json"),
                       doctest::Contains("version 7"), Error);
  CHECK_THROWS_WITH_AS(
      parse("{\"format\": \"flashjit-tune-db\", \"version\": 1099511627776, \"entries\": []}",
            "x.json"),
      doctest::Contains("version 1099511627776"), Error);
  CHECK_THROWS_WITH_AS(
      parse("{\"format\": \"flashjit-tune-db\", \"version\": 1, \"entries\": 3}", "x.json"),
      doctest::Contains("not a list"), Error);
}

TEST_CASE("autotune: parse skips a bad entry, naming it, and keeps the good ones") {
  json doc = json::parse(serialize({{entry(h200(), "abc", 4096, Tiles{128, 128, 8, 2}),
                                     entry(h200(), "def", 4096, Tiles{128, 64, 8, 2})}}));
  doc["entries"].push_back({{"gpu", 1}});
  doc["entries"][0]["tiles"]["warps"] = 0;
  const ParsedDb parsed = parse(doc.dump(), "x.json");
  REQUIRE(parsed.entries.tiles.size() == 1);
  CHECK(parsed.entries.tiles[0].spec_hash == "def");
  REQUIRE(parsed.skipped.size() == 2);
  CHECK(parsed.skipped[0].find("x.json: entries[0]: tiles") != std::string::npos);
  CHECK(parsed.skipped[1].find("x.json: entries[2]") != std::string::npos);
}

TEST_CASE("autotune: numbers that do not fit an int skip the entry; nested values are neither copied nor dumped") {
  // Found by fuzz/fuzz_tune_db: get<int>() of 3e60 is undefined behaviour, of 2^40 a truncation.
  for (const json& bad : {json(3.3e60), json(uint64_t{1} << 40), json(-(int64_t{1} << 40)),
                          json(2.5), json("8")}) {
    json doc = json::parse(serialize({{entry(h200(), "abc", 4096, Tiles{128, 128, 8, 2})}}));
    doc["entries"][0]["tiles"]["stages"] = bad;
    const ParsedDb parsed = parse(doc.dump(), "x.json");
    CHECK(parsed.entries.tiles.empty());
    REQUIRE(parsed.skipped.size() == 1);
    CHECK_MESSAGE(parsed.skipped[0].find("\"stages\" is not an integer that fits an int") !=
                      std::string::npos,
                  parsed.skipped[0]);
  }
  // Found by the sanitizer build: copying this "version" (recursive) overflowed the stack.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_THROWS_WITH_AS(
      parse("{\"format\": \"flashjit-tune-db\", \"version\": " + deep + ", \"entries\": []}",
            "x.json"),
      doctest::Contains("tune DB version (a list)"), Error);
}

TEST_CASE("autotune: an entry without heuristic tiles is written back as it was read") {
  // Found by fuzz/fuzz_tune_db: the optional field came back as zeros, which parse refuses,
  // so the next writer set the whole DB aside.
  json doc = json::parse(serialize({{entry(h200(), "abc", 4096, Tiles{128, 128, 8, 2})}}));
  doc["entries"][0].erase("heuristic_tiles");
  const ParsedDb first = parse(doc.dump(), "x.json");
  REQUIRE(first.entries.tiles.size() == 1);
  CHECK(first.entries.tiles[0].heuristic_tiles.is_auto());
  const ParsedDb again = parse(serialize(first.entries), "x.json");
  CHECK(again.skipped.empty());
  REQUIRE(again.entries.tiles.size() == 1);
  CHECK(again.entries.tiles[0].tiles == Tiles{128, 128, 8, 2});
}

TEST_CASE("autotune: record then lookup; a second record of the same key replaces it") {
  const test::TempDir dir;
  const TuneDb db((dir.path() / "sub" / "tune.json").string());  // folder made on demand
  CHECK(db.load().tiles.empty());
  db.record({entry(h200(), "abc", 4096, Tiles{128, 128, 8, 2}),
             entry(h200(), "abc", 1024, Tiles{128, 64, 4, 3})});
  Lookup found = db.lookup(h200(), "abc", ShapeBucket{4096, 4096, 64});
  REQUIRE(found.entry);
  CHECK(found.entry->tiles == Tiles{128, 128, 8, 2});
  CHECK(found.note.find("from tune DB") != std::string::npos);

  db.record({entry(h200(), "abc", 4096, Tiles{64, 64, 4, 2})});
  CHECK(db.load().tiles.size() == 2);
  found = db.lookup(h200(), "abc", ShapeBucket{4096, 4096, 64});
  REQUIRE(found.entry);
  CHECK(found.entry->tiles == Tiles{64, 64, 4, 2});
  // Another bucket or another spec: no entry.
  CHECK_FALSE(db.lookup(h200(), "abc", ShapeBucket{2048, 2048, 64}).entry);
  CHECK_FALSE(db.lookup(h200(), "def", ShapeBucket{4096, 4096, 64}).entry);
  // No temporary files are left behind.
  CHECK(count_with_prefix(dir.path() / "sub", "tune.json.tmp-") == 0);
}

TEST_CASE("autotune: entries made on another GPU, driver or NVRTC are ignored, not trusted") {
  const test::TempDir dir;
  const TuneDb db((dir.path() / "tune.json").string());
  GpuIdentity old_driver = h200();
  old_driver.driver_version = 12080;
  GpuIdentity h100 = h200();
  h100.name = "NVIDIA H100 80GB HBM3";
  GpuIdentity old_nvrtc = h200();
  old_nvrtc.nvrtc_version = "12.4";
  db.record({entry(old_driver, "abc", 4096, Tiles{64, 64, 4, 2}),
             entry(h100, "abc", 4096, Tiles{64, 64, 4, 2}),
             entry(old_nvrtc, "abc", 4096, Tiles{64, 64, 4, 2})});
  const Lookup found = db.lookup(h200(), "abc", ShapeBucket{4096, 4096, 64});
  CHECK_FALSE(found.entry);
  CHECK(found.ignored_other_gpu == 3);
  CHECK(found.note.find("ignored an entry made on NVIDIA H100") != std::string::npos);
  // Entries of several GPUs live side by side in one shipped file.
  db.record({entry(h200(), "abc", 4096, Tiles{128, 128, 8, 2})});
  CHECK(db.load().tiles.size() == 4);
  REQUIRE(db.lookup(h200(), "abc", ShapeBucket{4096, 4096, 64}).entry);
}

TEST_CASE("autotune: readers leave a corrupt DB as it is; a writer sets it aside") {
  const test::TempDir dir;
  const fs::path path = dir.path() / "tune.json";
  const std::string truncated = "{\"format\": \"flashjit-tune-db\", \"version\": 1, \"entries\": [";
  std::ofstream(path) << truncated;
  const TuneDb db(path.string());
  CHECK_THROWS_AS(db.load(), Error);
  // A lookup on a corrupt DB is a miss with the reason, and the file stays.
  const Lookup found = db.lookup(h200(), "abc", ShapeBucket{4096, 4096, 64});
  CHECK_FALSE(found.entry);
  CHECK(found.note.find("unusable") != std::string::npos);
  CHECK(slurp(path) == truncated);
  CHECK(count_with_prefix(dir.path(), "tune.json.corrupt-") == 0);
  // The next record sets it aside and starts a fresh file.
  db.record({entry(h200(), "abc", 4096, Tiles{128, 128, 8, 2})});
  CHECK(count_with_prefix(dir.path(), "tune.json.corrupt-") == 1);
  CHECK(db.load().tiles.size() == 1);
  CHECK(parse(slurp(path), "again").entries.tiles.size() == 1);
}

TEST_CASE("autotune: a folder at the DB path is an Error(Io) for readers, never renamed") {
  const test::TempDir dir;
  const fs::path path = dir.path() / "tune.json";
  fs::create_directory(path);
  CHECK_THROWS_WITH_AS(TuneDb(path.string()).load(), doctest::Contains("is a folder"), Error);
  CHECK_FALSE(TuneDb(path.string()).lookup(h200(), "abc", ShapeBucket{4096, 4096, 64}).entry);
  CHECK(fs::is_directory(path));
}

TEST_CASE("autotune: one bad entry costs only itself; the writer keeps a copy of the file") {
  const test::TempDir dir;
  const fs::path path = dir.path() / "tune.json";
  json doc = json::parse(serialize({{entry(h200(), "abc", 4096, Tiles{128, 128, 8, 2})}}));
  doc["entries"].push_back({{"gpu", "not an object"}});
  std::ofstream(path) << doc.dump();
  const TuneDb db(path.string());
  CHECK(db.load().tiles.size() == 1);
  CHECK(db.lookup(h200(), "abc", ShapeBucket{4096, 4096, 64}).entry);
  CHECK(count_with_prefix(dir.path(), "tune.json.corrupt-") == 0);
  db.record({entry(h200(), "def", 4096, Tiles{128, 64, 8, 2})});
  CHECK(db.load().tiles.size() == 2);  // the good old entry and the new one
  CHECK(count_with_prefix(dir.path(), "tune.json.corrupt-") == 1);
}

TEST_CASE("autotune: several processes recording at once lose no entry") {
  const test::TempDir dir;
  const std::string path = (dir.path() / "tune.json").string();
  constexpr int kProcesses = 8, kEntriesEach = 6;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Each child records its entries one by one: many overlapping read-merge-writes.
      int status = 0;
      try {
        const TuneDb db(path);
        for (int i = 0; i < kEntriesEach; ++i)
          db.record({entry(h200(), "spec" + std::to_string(p), 1 << (i + 4), Tiles{64, 64, 4, 2})});
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const std::vector<TuneEntry> all = TuneDb(path).load().tiles;
  CHECK(all.size() == kProcesses * kEntriesEach);
  for (int p = 0; p < kProcesses; ++p)
    for (int i = 0; i < kEntriesEach; ++i) {
      const int s = 1 << (i + 4);
      CHECK(TuneDb(path).lookup(h200(), "spec" + std::to_string(p), ShapeBucket{s, s, 64}).entry);
    }
  CHECK(count_with_prefix(dir.path(), "tune.json.tmp-") == 0);
}

TEST_CASE("autotune: the DB path is FLASHJIT_TUNE_DB, else tune.json in the cache folder") {
  {
    const test::ScopedEnv db("FLASHJIT_TUNE_DB", "/somewhere/mine.json");
    CHECK(default_db_path() == "/somewhere/mine.json");
  }
  const test::ScopedEnv db("FLASHJIT_TUNE_DB", std::nullopt);
  const test::ScopedEnv cache("FLASHJIT_CACHE_DIR", "/cache/here");
  CHECK(default_db_path() == "/cache/here/tune.json");
}

TEST_CASE("autotune: `flashjit tune --show` prints the DB; `tune` without a GPU exits 3") {
  const test::TempDir dir;
  const fs::path db_path = dir.path() / "tune.json";
  TuneDb(db_path.string()).record({entry(h200(), "abc", 4096, Tiles{128, 128, 8, 2})});
  const auto run = [&](const std::string& args) {
    const std::string command = std::string("'") + FLASHJIT_CLI_PATH + "' " + args + " >'" +
                                (dir.path() / "out").string() + "' 2>'" +
                                (dir.path() / "err").string() + "'";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  CHECK(run("tune --show --db '" + db_path.string() + "'") == 0);
  const std::string shown = slurp(dir.path() / "out");
  CHECK(shown.find("1 entry") != std::string::npos);
  CHECK(shown.find("m128n128w8s2") != std::string::npos);
  CHECK(shown.find("q4096 k4096 bh64") != std::string::npos);
  CHECK(shown.find("1.20x") != std::string::npos);

  // A reader reports an unusable DB (exit 5) and leaves it where it is.
  const fs::path bad = dir.path() / "bad.json";
  for (const std::string& text :
       {std::string("{\"unrelated\": true}"),
        std::string("{\"format\": \"flashjit-tune-db\", \"version\": 2, \"entries\": []}")}) {
    std::ofstream(bad, std::ios::trunc) << text;
    CHECK(run("tune --show --db '" + bad.string() + "'") == 5);
    CHECK(slurp(bad) == text);
  }
  fs::remove(bad);
  fs::create_directory(bad);
  CHECK(run("tune --show --db '" + bad.string() + "'") == 5);
  CHECK(slurp(dir.path() / "err").find("is a folder") != std::string::npos);
  CHECK(fs::is_directory(bad));
  CHECK(count_with_prefix(dir.path(), "bad.json.corrupt-") == 0);

  if (rt::Driver::available()) return;  // with a GPU, `tune` would really tune
  const std::string spec = std::string(FLASHJIT_SOURCE_DIR) + "/configs/hd64.yaml";
  CHECK(run("tune '" + spec + "' --db '" + db_path.string() + "'") == 3);
  CHECK(slurp(dir.path() / "err").find("needs a GPU") == std::string::npos);
  CHECK(slurp(dir.path() / "err").find("has none") != std::string::npos);
}

}  // namespace flashjit::tune
