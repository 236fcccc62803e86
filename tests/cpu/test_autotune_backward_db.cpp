// The tune DB's backward entries (`flashjit tune --backward`): their round trip, files written
// before them, lookups beside the forward's tile entries, and the test that keeps an entry of
// another path, target or impossible tiles away from the runtime.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "generator/kernel_path.h"
#include "runtime/tune_db.h"
#include "runtime/tune_db_tiles.h"
#include "tests/cpu/runtime_test_support.h"

namespace flashjit::tune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

GpuIdentity h200() { return GpuIdentity{"NVIDIA H200", 9, 0, 132, 13000, "13.0"}; }

// d192: on sm_90a its dK/dV and dQ steps take the two warp-specialised kernels (deterministic
// or not), each with a tuning grid of several tilings.
// Deterministic at d192: the two sm90 kernels (the dQ variant pairs its consumers there).
Spec two_kernel_d192() {
  Spec s = test::spec_of(192, 192);
  s.deterministic = true;
  return s;
}

// An entry for `spec` on sm_90a whose tiles the paths it takes can run.
BackwardEntry backward_entry(const Spec& spec, const GpuIdentity& gpu, int seqlen) {
  BackwardEntry e;
  e.gpu = gpu;
  e.spec_hash = spec_hash(spec);
  e.spec_summary = spec_summary(spec);
  e.bucket = ShapeBucket{seqlen, seqlen, 32};
  e.target = "sm_90a";
  e.dkdv_path = gen::choose_path(gen::Step::BwdDkDv, spec, e.target).name;
  e.dq_path = gen::choose_path(gen::Step::BwdDq, spec, e.target).name;
  e.tiles = {Tiles{64, 64, 12, 2}, Tiles{128, 64, 12, 2}};
  e.heuristic_tiles = {gen::default_tiles(spec, e.target, gen::Step::BwdDkDv),
                       gen::default_tiles(spec, e.target, gen::Step::BwdDq)};
  e.tuned_ms = 7.8;
  e.heuristic_ms = 9.2;
  e.tuned_at = "2026-12-04T10:00:00Z";
  return e;
}

}  // namespace

TEST_CASE("autotune backward: an entry survives serialize and parse field for field") {
  const BackwardEntry e = backward_entry(two_kernel_d192(), h200(), 16384);
  CHECK(e.dkdv_path == "bwd_dkdv_paired_sm90");
  CHECK(e.dq_path == "bwd_dq_sm90");
  const std::string text = serialize({{}, {}, {e}});
  const json written = json::parse(text)["entries"][0];
  CHECK(written["kind"] == "backward_tiles");
  CHECK(written["dkdv"]["path"] == "bwd_dkdv_paired_sm90");
  // A reader from before entry kinds finds no "tiles" and skips it, never taking the
  // backward's tiles for the forward's.
  CHECK_FALSE(written.contains("tiles"));
  const ParsedDb back = parse(text, "t.json");
  CHECK(back.skipped.empty());
  CHECK(back.entries.tiles.empty());
  REQUIRE(back.entries.backward.size() == 1);
  const BackwardEntry& b = back.entries.backward[0];
  CHECK(b.gpu == e.gpu);
  CHECK(b.spec_hash == e.spec_hash);
  CHECK(b.spec_summary == e.spec_summary);
  CHECK(b.bucket == e.bucket);
  CHECK(b.target == "sm_90a");
  CHECK(b.dkdv_path == e.dkdv_path);
  CHECK(b.dq_path == e.dq_path);
  CHECK(b.tiles == e.tiles);
  CHECK(b.heuristic_tiles == e.heuristic_tiles);
  CHECK(b.tuned_ms == doctest::Approx(7.8));
  CHECK(b.heuristic_ms == doctest::Approx(9.2));
  CHECK(b.tuned_at == e.tuned_at);
}

TEST_CASE("autotune backward: auto tiles are left out, and written back as they were read") {
  // The dQ-accumulating kernel's dQ step (its conversion) tunes nothing: its tiles stay auto.
  BackwardEntry e = backward_entry(two_kernel_d192(), h200(), 4096);
  e.tiles.dq = {};
  e.heuristic_tiles = {};
  const std::string text = serialize({{}, {}, {e}});
  const json dq = json::parse(text)["entries"][0]["dq"];
  CHECK_FALSE(dq.contains("tiles"));
  CHECK_FALSE(dq.contains("heuristic_tiles"));
  const ParsedDb back = parse(text, "t.json");
  REQUIRE(back.entries.backward.size() == 1);
  CHECK(back.entries.backward[0].tiles.dq.is_auto());
  CHECK(back.entries.backward[0].heuristic_tiles == BackwardTiles{});
  CHECK(serialize(back.entries) == text);
}

TEST_CASE("autotune backward: an entry missing a step or with impossible numbers is skipped") {
  const json good =
      json::parse(serialize({{}, {}, {backward_entry(two_kernel_d192(), h200(), 4096)}}));
  json no_dq = good;
  no_dq["entries"][0].erase("dq");
  json no_path = good;
  no_path["entries"][0]["dkdv"].erase("path");
  json zero = good;
  zero["entries"][0]["dkdv"]["tiles"]["block_m"] = 0;
  for (const json& bad : {no_dq, no_path, zero}) {
    const ParsedDb parsed = parse(bad.dump(), "x.json");
    CHECK(parsed.entries.backward.empty());
    REQUIRE(parsed.skipped.size() == 1);
    CHECK(parsed.skipped[0].find("x.json: entries[0]") != std::string::npos);
  }
}

TEST_CASE("autotune backward: files written before backward entries still read") {
  for (const char* golden : {"tune_db_before_kinds.json", "tune_db_before_backward.json"}) {
    CAPTURE(golden);
    const std::string text =
        test::slurp(fs::path(FLASHJIT_SOURCE_DIR) / "tests/cpu/golden" / golden);
    const ParsedDb parsed = parse(text, golden);
    CHECK(parsed.skipped.empty());
    CHECK(parsed.entries.backward.empty());
    CHECK_FALSE(parsed.entries.tiles.empty());
  }
  const ParsedDb both = parse(
      test::slurp(fs::path(FLASHJIT_SOURCE_DIR) / "tests/cpu/golden/tune_db_before_backward.json"),
      "old.json");
  CHECK(both.entries.decode.size() == 2);
}

TEST_CASE("autotune backward: entries live beside the forward's; a lookup goes by kind and key") {
  const test::TempDir dir;
  const TuneDb db((dir.path() / "tune.json").string());
  const Spec spec = two_kernel_d192();
  TuneEntry forward;
  forward.gpu = h200();
  forward.spec_hash = spec_hash(spec);
  forward.bucket = ShapeBucket{16384, 16384, 32};
  forward.target = "sm_90a";
  forward.tiles = Tiles{128, 128, 12, 2};
  db.record({forward});
  db.record({backward_entry(spec, h200(), 16384), backward_entry(spec, h200(), 1024)});
  const TuneDbEntries all = db.load();
  CHECK(all.tiles.size() == 1);
  CHECK(all.backward.size() == 2);

  BackwardLookup found = db.lookup_backward(h200(), spec_hash(spec), forward.bucket);
  REQUIRE(found.entry);
  CHECK(found.entry->tiles.dkdv == Tiles{64, 64, 12, 2});
  CHECK(found.note.find("backward tiles dK/dV m64n64w12s2") != std::string::npos);
  CHECK(db.lookup(h200(), spec_hash(spec), forward.bucket).entry->tiles == forward.tiles);

  // A second record of the same key replaces it; another GPU's entry is counted, not used.
  BackwardEntry again = backward_entry(spec, h200(), 16384);
  again.tiles.dkdv = Tiles{80, 128, 12, 2};
  GpuIdentity other = h200();
  other.driver_version += 10;
  db.record({again, backward_entry(spec, other, 16384)});
  CHECK(db.load().backward.size() == 3);
  found = db.lookup_backward(h200(), spec_hash(spec), forward.bucket);
  REQUIRE(found.entry);
  CHECK(found.entry->tiles.dkdv == Tiles{80, 128, 12, 2});
  CHECK(found.ignored_other_gpu == 1);
  CHECK_FALSE(db.lookup_backward(h200(), spec_hash(spec), ShapeBucket{2048, 2048, 32}).entry);
}

TEST_CASE("autotune backward: an entry serves only the target and paths it was tuned for") {
  const Spec spec = two_kernel_d192();
  const BackwardEntry good = backward_entry(spec, h200(), 4096);
  CHECK(rt::backward_entry_problem(spec, "sm_90a", good) == "");
  CHECK(rt::backward_entry_problem(spec, "sm_80", good).find("tuned for sm_90a, not sm_80") !=
        std::string::npos);
  // d64 takes the dK/dV kernel that accumulates dQ: in key-block order when deterministic,
  // in any order when not.
  Spec ordered = test::spec_of(64, 64);
  ordered.deterministic = true;
  const BackwardEntry ordered_entry = backward_entry(ordered, h200(), 4096);
  Spec fused = ordered;
  fused.deterministic = false;
  CHECK(rt::backward_entry_problem(fused, "sm_90a", ordered_entry)
            .find("tuned for the bwd_dkdv_dq_ordered_sm90 kernel, and the spec now takes "
                  "bwd_dkdv_dq_sm90") != std::string::npos);
  CHECK(rt::backward_entry_problem(spec, "sm_90a", ordered_entry)
            .find("tuned for the bwd_dkdv_dq_ordered_sm90 kernel, and the spec now takes "
                  "bwd_dkdv_paired_sm90") != std::string::npos);
  BackwardEntry impossible = good;
  impossible.tiles.dkdv.warps = 8;
  CHECK(rt::backward_entry_problem(spec, "sm_90a", impossible).find("bwd_dkdv_paired_sm90") !=
        std::string::npos);
  // An auto step leaves that step to the heuristic and is no problem.
  BackwardEntry dkdv_only = good;
  dkdv_only.tiles.dq = {};
  CHECK(rt::backward_entry_problem(spec, "sm_90a", dkdv_only) == "");
}

TEST_CASE("autotune backward: the tune DB's tile source answers the backward from its entry") {
  const test::TempDir dir;
  const std::string path = (dir.path() / "tune.json").string();
  const test::ScopedEnv db_env("FLASHJIT_TUNE_DB", path);
  const Spec spec = two_kernel_d192();
  const DeviceInfo device{"NVIDIA H200", 9, 0, 132, 13000};
  const std::string target = "sm_90a";
  const TileSource::Query query{spec, target, device, 1, 32, 16384, 16384};
  const rt::TuneDbTiles source;
  std::string why;
  CHECK_FALSE(source.backward_tiles(query, why));
  CHECK(why.find("no entry for this GPU") != std::string::npos);

  BackwardEntry e = backward_entry(spec, gpu_identity(device), 16384);
  TuneDb(path).record({e});
  const std::optional<BackwardTiles> tiles = source.backward_tiles(query, why);
  REQUIRE(tiles);
  CHECK(*tiles == e.tiles);
  // The forward's question is another kind: no forward entry, no tiles.
  CHECK_FALSE(source.tiles(query, why));

  e.dq_path = "bwd_dq_sm80";
  TuneDb(path).record({e});
  CHECK_FALSE(source.backward_tiles(query, why));
  CHECK(why.find("tuned for the bwd_dq_sm80 kernel") != std::string::npos);
  CHECK(why.find(": ignored") != std::string::npos);
}

}  // namespace flashjit::tune
