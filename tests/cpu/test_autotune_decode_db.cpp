// The tune DB's decode entries (key-split counts): their round trip, lookups by decode bucket
// beside tile entries in one file, files written before entry kinds, and kinds this flashjit
// does not know.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/tune_db.h"
#include "tests/cpu/runtime_test_support.h"

namespace flashjit::tune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

GpuIdentity h200() { return GpuIdentity{"NVIDIA H200", 9, 0, 132, 13000, "13.0"}; }

DecodeEntry decode_entry(const GpuIdentity& gpu, const std::string& hash, int seqlen_k,
                         int kv_splits) {
  DecodeEntry e;
  e.gpu = gpu;
  e.spec_hash = hash;
  e.spec_summary = "bf16 qk128 v128 full";
  e.bucket = DecodeBucket{4, seqlen_k, 128};
  e.kv_splits = kv_splits;
  e.heuristic_kv_splits = 32;
  e.tuned_ms = 0.5;
  e.heuristic_ms = 0.625;
  e.tuned_at = "2026-12-01T10:00:00Z";
  return e;
}

TuneEntry tiles_entry(const std::string& hash) {
  TuneEntry e;
  e.gpu = h200();
  e.spec_hash = hash;
  e.bucket = ShapeBucket{4096, 4096, 64};
  e.target = "sm_90a";
  e.tiles = Tiles{128, 128, 12, 2};
  return e;
}

int corrupt_copies(const fs::path& dir) {
  int n = 0;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().filename().string().rfind("tune.json.corrupt-", 0) == 0) ++n;
  return n;
}

}  // namespace

TEST_CASE("autotune: the decode bucket rounds packed rows, seqlen_k and batch x heads_kv up") {
  CHECK(decode_bucket_for(4, 30000, 16, 8) == DecodeBucket{4, 32768, 128});
  CHECK(decode_bucket_for(3, 4096, 9, 8) == DecodeBucket{4, 4096, 128});
  CHECK(decode_bucket_for(64, 131072, 1, 1) == DecodeBucket{64, 131072, 1});
  CHECK(describe(DecodeBucket{4, 32768, 128}) == "r4 k32768 bhkv128");
}

TEST_CASE("autotune: a decode entry survives serialize and parse field for field") {
  const DecodeEntry e = decode_entry(h200(), "abc", 32768, 24);
  const std::string text = serialize({{}, {e}});
  const json doc = json::parse(text);
  const json& written = doc["entries"][0];
  CHECK(written["kind"] == "decode_splits");
  // A reader from before entry kinds finds no "tiles" and skips the entry, never misreading it.
  CHECK_FALSE(written.contains("tiles"));
  const ParsedDb back = parse(text, "t.json");
  CHECK(back.skipped.empty());
  CHECK(back.entries.tiles.empty());
  REQUIRE(back.entries.decode.size() == 1);
  const DecodeEntry& b = back.entries.decode[0];
  CHECK(b.gpu == e.gpu);
  CHECK(b.spec_hash == "abc");
  CHECK(b.spec_summary == e.spec_summary);
  CHECK(b.bucket == e.bucket);
  CHECK(b.kv_splits == 24);
  CHECK(b.heuristic_kv_splits == 32);
  CHECK(b.tuned_ms == doctest::Approx(0.5));
  CHECK(b.heuristic_ms == doctest::Approx(0.625));
  CHECK(b.tuned_at == e.tuned_at);
}

TEST_CASE("autotune: a DB written before entry kinds still reads, as tile entries") {
  const std::string text =
      test::slurp(fs::path(FLASHJIT_SOURCE_DIR) / "tests/cpu/golden/tune_db_before_kinds.json");
  REQUIRE(text.find("\"kind\"") == std::string::npos);
  const ParsedDb parsed = parse(text, "old.json");
  CHECK(parsed.skipped.empty());
  CHECK(parsed.entries.decode.empty());
  REQUIRE(parsed.entries.tiles.size() == 2);
  CHECK(parsed.entries.tiles[0].tiles == Tiles{128, 128, 12, 3});
  // Written back, every entry says its kind, and reads the same.
  const std::string again = serialize(parsed.entries);
  CHECK(json::parse(again)["entries"][0]["kind"] == "tiles");
  CHECK(parse(again, "again.json").entries.tiles.size() == 2);
}

TEST_CASE("autotune: an entry kind this flashjit does not know is skipped, naming it") {
  json doc = json::parse(serialize({{tiles_entry("abc")}, {decode_entry(h200(), "abc", 4096, 8)}}));
  json future = doc["entries"][1];
  future["kind"] = "fp8_tiles";
  doc["entries"].push_back(future);
  json nested = doc["entries"][1];
  nested["kind"] = json::array({json::array()});
  doc["entries"].push_back(nested);
  const ParsedDb parsed = parse(doc.dump(), "x.json");
  CHECK(parsed.entries.tiles.size() == 1);
  CHECK(parsed.entries.decode.size() == 1);
  REQUIRE(parsed.skipped.size() == 2);
  CHECK(parsed.skipped[0].find("x.json: entries[2]: entry kind \"fp8_tiles\" is not one this "
                               "flashjit reads") != std::string::npos);
  CHECK(parsed.skipped[1].find("entry kind (a list)") != std::string::npos);
}

TEST_CASE("autotune: decode entries with a count outside 0..128 are skipped") {
  for (const json& bad : {json(-1), json(129), json(2.5), json("8")}) {
    json doc = json::parse(serialize({{}, {decode_entry(h200(), "abc", 4096, 8)}}));
    doc["entries"][0]["kv_splits"] = bad;
    const ParsedDb parsed = parse(doc.dump(), "x.json");
    CHECK(parsed.entries.decode.empty());
    REQUIRE(parsed.skipped.size() == 1);
    CHECK_MESSAGE(parsed.skipped[0].find("\"kv_splits\"") != std::string::npos, parsed.skipped[0]);
  }
}

TEST_CASE("autotune: decode entries live beside tile entries; lookups go by decode bucket") {
  const test::TempDir dir;
  const TuneDb db((dir.path() / "tune.json").string());
  db.record({tiles_entry("abc")});
  GpuIdentity other = h200();
  other.driver_version = 12080;
  db.record({decode_entry(h200(), "abc", 32768, 24), decode_entry(h200(), "abc", 4096, 0),
             decode_entry(other, "abc", 131072, 64)});
  TuneDbEntries all = db.load();
  CHECK(all.tiles.size() == 1);
  CHECK(all.decode.size() == 3);

  DecodeLookup found = db.lookup(h200(), "abc", decode_bucket_for(4, 30000, 16, 8));
  REQUIRE(found.entry);
  CHECK(found.entry->kv_splits == 24);
  CHECK(found.note.find("24 key splits from tune DB") != std::string::npos);
  // An entry that keeps the heuristic says so.
  found = db.lookup(h200(), "abc", DecodeBucket{4, 4096, 128});
  REQUIRE(found.entry);
  CHECK(found.entry->kv_splits == 0);
  CHECK(found.note.find("the heuristic's key splits") != std::string::npos);
  // Another GPU's entry, another spec, another bucket: nothing.
  found = db.lookup(h200(), "abc", DecodeBucket{4, 131072, 128});
  CHECK_FALSE(found.entry);
  CHECK(found.ignored_other_gpu == 1);
  CHECK_FALSE(db.lookup(h200(), "def", DecodeBucket{4, 32768, 128}).entry);
  CHECK_FALSE(db.lookup(h200(), "abc", DecodeBucket{8, 32768, 128}).entry);
  // The tile entry is still found by its own bucket, and a new count replaces the old one.
  CHECK(db.lookup(h200(), "abc", ShapeBucket{4096, 4096, 64}).entry);
  db.record({decode_entry(h200(), "abc", 32768, 16)});
  all = db.load();
  CHECK(all.decode.size() == 3);
  CHECK(db.lookup(h200(), "abc", DecodeBucket{4, 32768, 128}).entry.value().kv_splits == 16);
}

TEST_CASE("autotune: a writer meeting an unknown kind keeps a copy of the file, as for any bad entry") {
  const test::TempDir dir;
  const fs::path path = dir.path() / "tune.json";
  json doc = json::parse(serialize({{tiles_entry("abc")}, {}}));
  json future = doc["entries"][0];
  future["kind"] = "fp8_tiles";
  doc["entries"].push_back(future);
  std::ofstream(path) << doc.dump();
  const TuneDb db(path.string());
  CHECK(db.load().tiles.size() == 1);
  CHECK(corrupt_copies(dir.path()) == 0);  // readers leave it be
  db.record({decode_entry(h200(), "abc", 4096, 8)});
  CHECK(corrupt_copies(dir.path()) == 1);
  const TuneDbEntries kept = db.load();
  CHECK(kept.tiles.size() == 1);
  CHECK(kept.decode.size() == 1);
}

}  // namespace flashjit::tune
