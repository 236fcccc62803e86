// The tuner's candidate space: what is tried, what is pruned before compiling and why.
#include <doctest/doctest.h>

#include <algorithm>

#include "autotune/candidates.h"
#include "generator/fwd_sm80_path.h"
#include "generator/fwd_sm90_path.h"
#include "generator/plan.h"

namespace flashjit::tune {
namespace {

// The sm80 kernel's space (warp specialisation off, so sm_90a plans it too).
Spec spec_of(int dqk, int dv) {
  Spec s;
  s.name = "t";
  s.head_dim_qk = dqk;
  s.head_dim_v = dv;
  s.warp_specialization = false;
  return s;
}

Spec ws_spec_of(int dqk, int dv) {
  Spec s = spec_of(dqk, dv);
  s.warp_specialization = true;
  return s;
}

bool contains(const std::vector<Tiles>& list, const Tiles& t) {
  return std::find(list.begin(), list.end(), t) != list.end();
}

}  // namespace

TEST_CASE("autotune: the heuristic's tiles come first and are never pruned") {
  for (int d : {8, 64, 100, 128, 192, 256, 512})
  for (const Spec& s : {spec_of(d, d), ws_spec_of(d, d)}) {
    const CandidateSpace space = candidate_space(s, "sm_90a");
    REQUIRE_FALSE(space.candidates.empty());
    CHECK(space.candidates.front() == gen::default_tiles(s, "sm_90a"));
    CHECK(std::count(space.candidates.begin(), space.candidates.end(), space.candidates.front()) == 1);
  }
}

TEST_CASE("autotune: every candidate satisfies the sm80 tile rules, shared memory and registers") {
  for (const std::string target : {"sm_80", "sm_86", "sm_90a"}) {
    for (auto [dqk, dv] : {std::pair{64, 64}, {128, 128}, {192, 128}, {256, 256}, {512, 512}, {72, 72}}) {
      const Spec s = spec_of(dqk, dv);
      const gen::PaddedDims dims = gen::padded_dims(s);
      const CandidateSpace space = candidate_space(s, target);
      for (const Tiles& t : space.candidates) {
        CAPTURE(tiles_label(t));
        CHECK(gen::sm80_tiles_problem(dims, t, target) == "");
        CHECK(gen::sm80_accumulator_registers(dims.dv_slice, t) <= gen::kSm80MaxAccumulatorRegisters);
      }
      for (const PrunedTiles& p : space.pruned) CHECK_FALSE(p.reason.empty());
      // Modest: tuning one spec over three buckets must fit in a minute.
      CHECK(space.candidates.size() <= 20);
    }
  }
}

TEST_CASE("autotune: the d128 space on the H200 holds the sweep's best tiles") {
  const CandidateSpace space = candidate_space(spec_of(128, 128), "sm_90a");
  CHECK(space.candidates.size() >= 10);
  CHECK(contains(space.candidates, Tiles{128, 128, 8, 2}));  // best without spills (sweep)
  // Two row groups of 64 O, 32 S and 16 P registers: 224, past the sm80 budget (ptxas
  // spills 68 bytes at d128 m128 n64 w4), so it is pruned rather than compiled and refused.
  CHECK_FALSE(contains(space.candidates, Tiles{128, 64, 4, 3}));
  // block_m 64 cannot be split over 8 warps of 16 rows: pruned by the tile rules.
  const auto pruned = std::find_if(space.pruned.begin(), space.pruned.end(), [](const PrunedTiles& p) {
    return p.tiles == Tiles{64, 64, 8, 2};
  });
  REQUIRE(pruned != space.pruned.end());
  CHECK(pruned->reason.find("multiple of 16 * warps") != std::string::npos);
}

TEST_CASE("autotune: shared memory prunes deep pipelines of wide tiles, more on smaller GPUs") {
  const Spec s = spec_of(256, 256);
  const CandidateSpace h200 = candidate_space(s, "sm_90a");
  const CandidateSpace ada = candidate_space(s, "sm_89");
  CHECK(h200.candidates.size() > ada.candidates.size());
  const auto by_shared = std::find_if(h200.pruned.begin(), h200.pruned.end(), [](const PrunedTiles& p) {
    return p.tiles == Tiles{64, 128, 4, 3};
  });
  REQUIRE(by_shared != h200.pruned.end());
  CHECK(by_shared->reason.find("shared memory") != std::string::npos);
}

TEST_CASE("autotune: the register estimate prunes what must spill") {
  // d 256, block_m 128 over 4 warps: two row groups, each with 128 O + 32 S floats and 16
  // registers of P a thread.
  CHECK(gen::sm80_accumulator_registers(256, Tiles{128, 64, 4, 2}) == 2 * (128 + 32 + 16));
  const CandidateSpace space = candidate_space(spec_of(256, 256), "sm_90a");
  CHECK_FALSE(contains(space.candidates, Tiles{128, 64, 4, 2}));
  const auto pruned = std::find_if(space.pruned.begin(), space.pruned.end(), [](const PrunedTiles& p) {
    return p.tiles == Tiles{128, 64, 4, 2};
  });
  REQUIRE(pruned != space.pruned.end());
  CHECK(pruned->reason.find("registers") != std::string::npos);
  // Narrow key blocks are tried from head dim 256 on, where the heuristic uses them.
  CHECK(contains(space.candidates, Tiles{64, 16, 4, 2}));
  CHECK_FALSE(contains(candidate_space(spec_of(128, 128), "sm_90a").candidates, Tiles{64, 16, 4, 2}));
}

TEST_CASE("autotune: specs the tuner cannot serve are refused with the reason") {
  Spec fixed = spec_of(64, 64);
  fixed.tiles = Tiles{64, 64, 4, 2};
  CHECK_THROWS_WITH_AS(candidate_space(fixed, "sm_90a"), doctest::Contains("fixes its tiles"), Error);
  CHECK_THROWS_AS(candidate_space(spec_of(64, 64), "sm_75"), Error);
}

TEST_CASE("autotune: the warp-specialised kernel tunes its key block and ring depth") {
  for (auto [dqk, dv] : {std::pair{64, 64}, {128, 128}, {192, 128}, {256, 256}, {512, 512}}) {
    const Spec s = ws_spec_of(dqk, dv);
    const gen::PaddedDims dims = gen::padded_dims(s);
    const CandidateSpace space = candidate_space(s, "sm_90a");
    CHECK(space.candidates.size() <= 27);
    for (const Tiles& t : space.candidates) {
      CAPTURE(tiles_label(t));
      CHECK(t.block_m == gen::kSm90BlockM);
      CHECK(t.warps == gen::kSm90Warps);
      CHECK(gen::sm90_tiles_problem(dims, t, "sm_90a") == "");
    }
  }
  const CandidateSpace d128 = candidate_space(ws_spec_of(128, 128), "sm_90a");
  CHECK(contains(d128.candidates, Tiles{128, 176, 12, 2}));  // FlashAttention-3's d128 block
  // On other targets the same spec tunes the sm80 kernel.
  CHECK(candidate_space(ws_spec_of(128, 128), "sm_80").candidates.front().warps != 12);
}

TEST_CASE("autotune: tiles labels follow the kernel names") {
  CHECK(tiles_label(Tiles{128, 64, 4, 3}) == "m128n64w4s3");
}

}  // namespace flashjit::tune
