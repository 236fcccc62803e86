// The backward tuner's candidate space (`flashjit tune --backward`): the paths whose tiles it
// tunes, the heuristic's pair first, then one step varied at a time, and what is pruned.
#include <doctest/doctest.h>

#include <algorithm>

#include "autotune/candidates.h"
#include "autotune/fastest.h"
#include "generator/plan.h"
#include "runtime/operation.h"
#include "tests/cpu/runtime_test_support.h"

namespace flashjit::tune {
namespace {

Spec spec_of(int dqk, int dv, bool deterministic) {
  Spec s = test::spec_of(dqk, dv);
  s.deterministic = deterministic;
  return s;
}

// Every candidate: tiles its paths can run, the heuristic's once and first, then the dK/dV
// step's tilings with the heuristic's dQ, then the dQ step's with the heuristic's dK/dV.
void check_space(const Spec& spec, const std::string& target) {
  const BackwardCandidateSpace space = backward_candidate_space(spec, target);
  REQUIRE_FALSE(space.candidates.empty());
  const BackwardTiles& heuristic = space.candidates.front();
  CHECK(heuristic.dkdv == gen::default_tiles(spec, target, gen::Step::BwdDkDv));
  CHECK(heuristic.dq == (space.dq_path->tuning_grid(spec).empty()
                             ? Tiles{}
                             : gen::default_tiles(spec, target, gen::Step::BwdDq)));
  CHECK(std::count(space.candidates.begin(), space.candidates.end(), heuristic) == 1);
  for (size_t i = 1; i < space.candidates.size(); ++i) {
    const BackwardTiles& t = space.candidates[i];
    CAPTURE(candidate_label(t));
    if (i < space.first_dq) {
      CHECK(t.dq == heuristic.dq);
      CHECK_FALSE(t.dkdv == heuristic.dkdv);
    } else {
      CHECK(t.dkdv == heuristic.dkdv);
      CHECK_FALSE(t.dq == heuristic.dq);
    }
    CHECK(rt::backward_tiles_problem(spec, target, t) == "");
    // The plan of a TMA-loadable, 16-byte aligned call takes them as they are.
    const rt::OperationPlan plan = rt::plan_backward(spec, target, {}, &t);
    CHECK(plan.launches[1].tiles == t.dkdv);
    // An untunable dQ step (the dQ variant's conversion) plans its one tiling.
    CHECK(plan.launches[2].tiles ==
          (t.dq.is_auto() ? rt::plan_backward(spec, target, {}).launches[2].tiles : t.dq));
  }
  for (const PrunedTiles& p : space.pruned) {
    CHECK_FALSE(p.reason.empty());
    CHECK((p.step == gen::Step::BwdDkDv || p.step == gen::Step::BwdDq));
  }
}

bool has_dkdv(const BackwardCandidateSpace& space, const Tiles& t) {
  return std::any_of(space.candidates.begin(), space.candidates.end(),
                     [&](const BackwardTiles& c) { return c.dkdv == t; });
}

}  // namespace

TEST_CASE("autotune backward: the two sm90 kernels tune the dK/dV query step and the dQ key "
          "step; the ordered dK/dV/dQ kernel its query step alone") {
  const BackwardCandidateSpace space = backward_candidate_space(spec_of(136, 136, true), "sm_90a");
  CHECK(std::string(space.dkdv_path->name) == "bwd_dkdv_sm90");
  CHECK(std::string(space.dq_path->name) == "bwd_dq_sm90");
  CHECK(space.candidates.front().dkdv == Tiles{48, 128, 12, 2});
  CHECK(has_dkdv(space, Tiles{32, 128, 12, 2}));
  CHECK(space.first_dq > 1);
  CHECK(space.candidates.size() > space.first_dq);
  // Modest: one spec's three buckets must time in a minute or two.
  CHECK(space.candidates.size() <= 16);
  // Deterministic d192: the paired dK/dV kernel's query steps, then the dQ kernel's key steps.
  const BackwardCandidateSpace paired =
      backward_candidate_space(spec_of(192, 192, true), "sm_90a");
  CHECK(std::string(paired.dkdv_path->name) == "bwd_dkdv_paired_sm90");
  CHECK(std::string(paired.dq_path->name) == "bwd_dq_sm90");
  CHECK(paired.candidates.front().dkdv == Tiles{96, 64, 12, 2});
  CHECK(has_dkdv(paired, Tiles{64, 64, 12, 2}));
  CHECK(paired.candidates.size() > paired.first_dq);
  // Deterministic d64: 128 query rows a step, or 64; bwd_dq_convert has nothing to tune.
  const BackwardCandidateSpace ordered = backward_candidate_space(spec_of(64, 64, true), "sm_90a");
  CHECK(std::string(ordered.dkdv_path->name) == "bwd_dkdv_dq_ordered_sm90");
  CHECK(std::string(ordered.dq_path->name) == "bwd_dq_convert");
  CHECK(ordered.candidates.front().dkdv == Tiles{128, 128, 12, 2});
  CHECK(has_dkdv(ordered, Tiles{64, 128, 12, 2}));
  CHECK(ordered.candidates.size() == ordered.first_dq);
  for (int d : {64, 96, 128, 192, 256})
    for (bool deterministic : {true, false}) {
      CAPTURE(d);
      CAPTURE(deterministic);
      check_space(spec_of(d, d, deterministic), "sm_90a");
    }
}

TEST_CASE("autotune backward: the dQ-accumulating kernel tunes its query step, and dQ's "
          "conversion nothing") {
  const BackwardCandidateSpace space = backward_candidate_space(spec_of(64, 64, false), "sm_90a");
  CHECK(std::string(space.dkdv_path->name) == "bwd_dkdv_dq_sm90");
  CHECK(std::string(space.dq_path->name) == "bwd_dq_convert");
  REQUIRE(space.candidates.size() == 5);
  CHECK(space.first_dq == 5);
  CHECK(space.candidates[0].dkdv == Tiles{128, 128, 12, 2});
  CHECK(space.candidates[1].dkdv == Tiles{64, 128, 12, 2});
  CHECK(space.candidates[2].dkdv == Tiles{64, 64, 12, 2});  // paired consumers, timed too
  CHECK(space.candidates[3].dkdv == Tiles{64, 96, 12, 2});  // and swapped ones, both ways
  CHECK(space.candidates[4].dkdv == Tiles{64, 96, 12, 1});
  CHECK(space.candidates.front().dq.is_auto());
  // d128: the 64-row tiling, the paired and the swapped ones; 128/256 starts from the paired
  // one.
  CHECK(backward_candidate_space(spec_of(128, 128, false), "sm_90a").candidates.size() == 4);
  CHECK(backward_candidate_space(spec_of(128, 256, false), "sm_90a").candidates.front().dkdv ==
        Tiles{64, 64, 12, 2});
  // d256's dK and dV do not fit one CTA beside a 64-row tile, nor paired with dQ's stages and
  // two ring slots, nor swapped: the paired dK/dV kernel and the dQ kernel serve it, with their
  // grids. d192 takes the swapped consumers at one dO slot, and its space starts there.
  const BackwardCandidateSpace d256 = backward_candidate_space(spec_of(256, 256, false), "sm_90a");
  CHECK(std::string(d256.dkdv_path->name) == "bwd_dkdv_paired_sm90");
  CHECK(d256.candidates.size() > 1);
  const BackwardCandidateSpace d192 = backward_candidate_space(spec_of(192, 192, false), "sm_90a");
  CHECK(std::string(d192.dkdv_path->name) == "bwd_dkdv_dq_sm90");
  CHECK(d192.candidates.front().dkdv == Tiles{64, 96, 12, 1});
}

TEST_CASE("autotune backward: the sm80 kernels' spaces on Ampere and Ada, pruned by shared "
          "memory") {
  for (const std::string target : {"sm_80", "sm_86"})
    for (auto [dqk, dv] : {std::pair{64, 64}, {128, 128}, {192, 128}, {256, 256}}) {
      CAPTURE(target);
      CAPTURE(dqk);
      check_space(spec_of(dqk, dv, false), target);
    }
  const Spec d128 = spec_of(128, 128, false);
  const BackwardCandidateSpace a100 = backward_candidate_space(d128, "sm_80");
  const BackwardCandidateSpace ada = backward_candidate_space(d128, "sm_86");
  CHECK(std::string(a100.dkdv_path->name) == "bwd_dkdv_sm80");
  CHECK(std::string(a100.dq_path->name) == "bwd_dq_sm80");
  CHECK(a100.candidates.size() >= ada.candidates.size());
  const auto shared = std::find_if(ada.pruned.begin(), ada.pruned.end(), [](const PrunedTiles& p) {
    return p.reason.find("shared memory") != std::string::npos;
  });
  CHECK(shared != ada.pruned.end());
}

TEST_CASE("autotune backward: what the backward tuner refuses, and what it takes that the "
          "forward's does not") {
  Spec sparse = test::spec_of(64, 64);
  sparse.mask = MaskKind::BlockSparse;
  sparse.block_q = sparse.block_k = 128;
  CHECK_THROWS_WITH_AS(backward_candidate_space(sparse, "sm_90a"),
                       doctest::Contains("leave the backward's tiles to the heuristic"), Error);
  CHECK_THROWS_WITH_AS(check_tunable(sparse, true), doctest::Contains("block_sparse"), Error);
  CHECK_THROWS_AS(backward_candidate_space(test::spec_of(64, 64), "sm_75"), Error);
  // A spec's own tiles are the forward's: its backward still tunes.
  Spec fixed = test::spec_of(64, 64);
  fixed.tiles = Tiles{64, 64, 4, 2};
  CHECK_THROWS_WITH_AS(check_tunable(fixed, false), doctest::Contains("fixes its tiles"), Error);
  CHECK_NOTHROW(check_tunable(fixed, true));
  CHECK_FALSE(backward_candidate_space(fixed, "sm_90a").candidates.empty());
}

TEST_CASE("autotune backward: a candidate's label names both steps' tiles") {
  CHECK(candidate_label(BackwardTiles{{96, 128, 12, 2}, {128, 128, 12, 2}}) ==
        "dK/dV m96n128w12s2 dQ m128n128w12s2");
  CHECK(rt::backward_tiles_label(BackwardTiles{{96, 128, 12, 2}, {}}) ==
        "dK/dV m96n128w12s2 dQ heuristic");
}

}  // namespace flashjit::tune
