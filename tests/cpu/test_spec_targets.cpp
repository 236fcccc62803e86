// For which targets a spec gets a forward kernel (generator/spec_targets.h), and the refusal
// located at the field to blame (generator/spec_source.h): what `flashjit check`, `gen` and
// `compile` report before planning (issue 18 item 8).
#include <doctest/doctest.h>

#include <string>

#include "generator/plan.h"
#include "generator/spec_source.h"
#include "generator/spec_targets.h"

using flashjit::Error;
using flashjit::ErrorKind;
namespace gen = flashjit::gen;

namespace {

const char* kHead = "name: t\nhead_dim: 128\n";

gen::LocatedSpec read(const std::string& text) { return gen::read_located_spec(text, "t.yaml"); }

// The located error of `text` on `target` ("" when the target gets a kernel).
std::string refusal(const std::string& text, const std::string& target) {
  const gen::LocatedSpec spec = read(text);
  const auto problem = gen::target_problem(spec.spec, target);
  if (!problem) return "";
  const Error error = gen::located_error(spec, *problem);
  CHECK(error.kind() == ErrorKind::Spec);
  return error.what();
}

bool starts_with(const std::string& text, const std::string& head) {
  return text.rfind(head, 0) == 0;
}

}  // namespace

TEST_CASE("spec targets: the locations of fields, maps and the defaults' words") {
  const gen::LocatedSpec spec =
      read("name: t\nhead_dim: 100\ncausal: true\ntiles: {block_m: 64, block_n: 64, warps: 4, "
           "stages: 2}\n");
  CHECK(spec.source == "t.yaml");
  const gen::FieldLocation& qk = spec.fields.at("head_dim_qk");
  CHECK(qk.line == 2);
  CHECK(qk.column == 11);
  CHECK(qk.key == "head_dim");  // the user's key, not the canonical field
  CHECK(spec.fields.at("tiles").line == 4);
  CHECK(spec.fields.at("tiles").column == 8);
  CHECK(spec.fields.at("tiles.stages").column == 53);
  CHECK(read("head_dim: 64\nmask: none\ntiles: auto\n").fields.at("tiles").line == 3);
  CHECK(read("head_dim: 64\nmask: none\n").fields.at("mask").line == 2);
}

TEST_CASE("spec targets: a problem of a field not written is placed at the document's start") {
  const gen::LocatedSpec spec = read("head_dim: 64\n");
  const std::string message =
      gen::located_error(spec, {"tiles", "no tiles fit", "auto"}).what();
  CHECK(message == "t.yaml:1:1: tiles: no tiles fit; allowed: auto");
}

TEST_CASE("spec targets: arch decides which targets are checked") {
  CHECK(gen::allowed_targets(read("head_dim: 64\n").spec) ==
        std::vector<std::string>{"sm_80", "sm_86", "sm_89", "sm_90a"});
  CHECK(gen::allowed_targets(read("head_dim: 64\narch: sm80\n").spec).size() == 4);
  CHECK(gen::allowed_targets(read("head_dim: 64\narch: sm90a\n").spec) ==
        std::vector<std::string>{"sm_90a"});
  const std::string arch = refusal("head_dim: 64\narch: sm90a\n", "sm_80");
  CHECK_MESSAGE(starts_with(arch, "t.yaml:2:7: arch: sm90a kernels run on sm_90a only"), arch);
}

TEST_CASE("spec targets: tiles: auto gets a kernel on every target for every head dim") {
  for (const char* dims : {"head_dim: 1", "head_dim: 97", "head_dim: 512",
                           "head_dim_qk: 64\nhead_dim_v: 256"})
    for (const std::string& target : {"sm_80", "sm_86", "sm_89", "sm_90a"}) {
      INFO(dims, " ", target);
      CHECK(refusal(std::string(dims) + "\n", target).empty());
    }
}

TEST_CASE("spec targets: tiles one kernel cannot run are refused at tiles:, with the reason") {
  const std::string sm90_tiles =
      std::string(kHead) + "tiles: {block_m: 128, block_n: 128, warps: 12, stages: 3}\n";
  CHECK(refusal(sm90_tiles, "sm_90a").empty());
  const std::string on_sm80 = refusal(sm90_tiles, "sm_80");
  CHECK_MESSAGE(starts_with(on_sm80, "t.yaml:3:8: tiles: the sm80 kernel, which sm_80 runs, "
                                     "cannot run them: 12 warps is the sm90 kernel's shape"),
                on_sm80);
  CHECK(on_sm80.find("; allowed: auto, or tiles the sm80 kernel runs on sm_80") !=
        std::string::npos);

  const std::string sm80_tiles =
      std::string(kHead) + "tiles: {block_m: 128, block_n: 64, warps: 4, stages: 2}\n";
  CHECK(refusal(sm80_tiles, "sm_80").empty());
  const std::string on_sm90 = refusal(sm80_tiles, "sm_90a");
  CHECK_MESSAGE(starts_with(on_sm90, "t.yaml:3:8: tiles: the sm90 kernel, which sm_90a runs, "
                                     "cannot run them: the warp-specialised kernel runs "
                                     "block_m 128 with 12 warps"),
                on_sm90);
  // Without warp specialization sm_90a runs the sm80 kernel, and the same tiles fit.
  CHECK(refusal(sm80_tiles + "hopper: {warp_specialization: false}\n", "sm_90a").empty());
}

TEST_CASE("spec targets: one stage, and shared memory over one target's limit") {
  const std::string one_stage =
      refusal(std::string(kHead) + "tiles: {block_m: 64, block_n: 64, warps: 4, stages: 1}\n",
              "sm_80");
  CHECK_MESSAGE(one_stage.find("stages 1: the sm80 pipeline needs at least 2") !=
                    std::string::npos,
                one_stage);
  // 132 KB: inside sm_80's 163 KB, over the 99 KB of sm_86 and sm_89.
  const std::string big = "name: t\nhead_dim: 256\ntiles: {block_m: 64, block_n: 32, warps: 4, "
                          "stages: 3}\n";
  CHECK(refusal(big, "sm_80").empty());
  const std::string on_sm86 = refusal(big, "sm_86");
  CHECK_MESSAGE(starts_with(on_sm86, "t.yaml:3:8: tiles: the sm80 kernel, which sm_86 runs"),
                on_sm86);
  CHECK(on_sm86.find("they need 135168 bytes of shared memory; sm_86 allows 101376") !=
        std::string::npos);
}

TEST_CASE("spec targets: whatever target_problem accepts, make_plan plans") {
  for (const char* tiles : {"auto", "{block_m: 128, block_n: 128, warps: 12, stages: 3}",
                            "{block_m: 64, block_n: 64, warps: 4, stages: 1}",
                            "{block_m: 64, block_n: 32, warps: 4, stages: 3}"})
    for (const std::string& target : {"sm_80", "sm_86", "sm_89", "sm_90a"}) {
      const gen::LocatedSpec spec =
          read(std::string("name: t\nhead_dim: 256\ntiles: ") + tiles + "\n");
      INFO(tiles, " ", target);
      if (gen::target_problem(spec.spec, target))
        CHECK_THROWS_AS(gen::make_plan(spec.spec, target), Error);
      else
        CHECK_NOTHROW(gen::make_plan(spec.spec, target));
    }
}
