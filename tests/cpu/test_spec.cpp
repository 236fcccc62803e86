// Spec parsing, validation, defaults, printing, the shipped configs, and dense strides.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "flashjit/flashjit.h"

using flashjit::Arch;
using flashjit::DType;
using flashjit::Error;
using flashjit::ErrorKind;
using flashjit::ForwardArgs;
using flashjit::MaskKind;
using flashjit::Spec;
using flashjit::Tiles;

namespace {

// The message of the Error(Spec) that parsing `text` as "bad.yaml" throws ("" if none).
std::string yaml_error(const std::string& text) {
  try {
    Spec::from_yaml(text, "bad.yaml");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Spec);
    return e.what();
  }
  return "";
}

// Checks that parsing fails with a message that starts with `head` (file:line:col: field:)
// and holds each of `parts`; every message also says what is allowed.
void check_yaml_error(const std::string& text, const std::string& head,
                      const std::vector<std::string>& parts = {}) {
  std::string message = yaml_error(text);
  INFO("yaml:\n", text, "\nmessage: ", message);
  CHECK(message.rfind(head, 0) == 0);
  CHECK(message.find("; allowed: ") != std::string::npos);
  for (const auto& part : parts) CHECK(message.find(part) != std::string::npos);
}

std::string validate_error(const Spec& spec) {
  try {
    spec.validate();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Spec);
    return e.what();
  }
  return "";
}

Spec valid_spec() {
  Spec spec;
  spec.head_dim_qk = 100;
  spec.head_dim_v = 100;
  return spec;
}

void check_same(const Spec& a, const Spec& b) {
  CHECK(a.name == b.name);
  CHECK(a.head_dim_qk == b.head_dim_qk);
  CHECK(a.head_dim_v == b.head_dim_v);
  CHECK(a.dtype == b.dtype);
  CHECK(a.causal == b.causal);
  CHECK(a.mask == b.mask);
  CHECK(a.window_left == b.window_left);
  CHECK(a.window_right == b.window_right);
  CHECK(a.arch == b.arch);
  CHECK(a.warp_specialization == b.warp_specialization);
  CHECK(a.tiles == b.tiles);
  CHECK(a.block_q == b.block_q);
  CHECK(a.block_k == b.block_k);
  CHECK(a.pattern == b.pattern);
  CHECK(a.pattern_window == b.pattern_window);
  CHECK(a.pattern_stride == b.pattern_stride);
  CHECK(a.pattern_global == b.pattern_global);
}

}  // namespace

TEST_CASE("spec: the issue's example parses") {
  Spec spec = Spec::from_yaml(R"(name: hd100_causal_bf16
head_dim: 100
dtype: bf16
causal: true
mask: none
arch: auto
hopper: {warp_specialization: false}
tiles: auto
)");
  CHECK(spec.name == "hd100_causal_bf16");
  CHECK(spec.head_dim_qk == 100);
  CHECK(spec.head_dim_v == 100);
  CHECK(spec.dtype == DType::BF16);
  CHECK(spec.causal);
  CHECK(spec.mask == MaskKind::None);
  CHECK(spec.arch == Arch::Auto);
  CHECK_FALSE(spec.warp_specialization);
  CHECK(spec.tiles.is_auto());
}

TEST_CASE("spec: defaults") {
  Spec spec = Spec::from_yaml("head_dim: 100\n");
  CHECK(spec.name == "qk100_v100_bf16");
  CHECK(spec.dtype == DType::BF16);
  CHECK_FALSE(spec.causal);
  CHECK(spec.mask == MaskKind::None);
  CHECK(spec.arch == Arch::Auto);
  CHECK(spec.warp_specialization);  // the Hopper kernel wherever it can run
  CHECK(spec.tiles == Tiles{});
  CHECK(Spec::from_yaml("head_dim: 100\ncausal: true\ndtype: fp16\n").name ==
        "qk100_v100_fp16_causal");
  CHECK(Spec::from_yaml("{head_dim: 8, hopper: {}}").warp_specialization == true);
  CHECK(Spec::from_yaml("{head_dim: 8, hopper: {warp_specialization: false}}").warp_specialization ==
        false);
}

TEST_CASE("spec: head_dim_qk and head_dim_v are independent") {
  Spec spec = Spec::from_yaml("head_dim_qk: 192\nhead_dim_v: 128\n");
  CHECK(spec.head_dim_qk == 192);
  CHECK(spec.head_dim_v == 128);
  CHECK(spec.name == "qk192_v128_bf16");
  CHECK(Spec::from_yaml("head_dim: 1").head_dim_v == 1);
  CHECK(Spec::from_yaml("head_dim: 512").head_dim_qk == 512);
}

TEST_CASE("spec: every field given explicitly") {
  Spec spec = Spec::from_yaml(R"(name: my-kernel_2
head_dim_qk: 64
head_dim_v: 256
dtype: fp16
causal: false
mask: none
arch: sm90a
hopper: {warp_specialization: true}
tiles: {block_m: 128, block_n: 64, warps: 4, stages: 2}
)");
  CHECK(spec.name == "my-kernel_2");
  CHECK(spec.dtype == DType::F16);
  CHECK(spec.arch == Arch::Sm90a);
  CHECK(spec.warp_specialization);
  CHECK(spec.tiles == Tiles{128, 64, 4, 2});
  CHECK(Spec::from_yaml("head_dim: 8\narch: sm80\n").arch == Arch::Sm80);
  CHECK(Spec::from_yaml("head_dim: 8\ncausal: True\n").causal);
}

TEST_CASE("spec errors: unknown keys name the key, its position, the allowed keys, a suggestion") {
  check_yaml_error("name: x\nhead_dim: 64\ncasual: true\n", "bad.yaml:3:1: casual: unknown key",
                   {"did you mean 'causal'?",
                    "allowed: name, head_dim, head_dim_qk, head_dim_v, "
                    "dtype, causal, mask, arch, hopper, backward, decode, tiles"});
  CHECK(yaml_error("head_dim: 64\ncolour: red\n").find("did you mean") == std::string::npos);
  check_yaml_error("head_dim: 64\nhopper: {warp_specialisation: true}\n",
                   "bad.yaml:2:10: hopper.warp_specialisation: unknown key",
                   {"did you mean 'warp_specialization'?", "allowed: warp_specialization"});
  check_yaml_error("head_dim: 64\ntiles:\n  block_m: 64\n  blockn: 64\n",
                   "bad.yaml:4:3: tiles.blockn: unknown key",
                   {"did you mean 'block_n'?", "allowed: block_m, block_n, warps, stages"});
  check_yaml_error("head_dim: 64\nhead_dim: 65\n", "bad.yaml:2:1: head_dim: given twice",
                   {"first at line 1"});
  check_yaml_error("head_dim: 64\n[a]: 1\n", "bad.yaml:2:1: spec: a key is a sequence");
}

TEST_CASE("spec errors: the top level must be a map") {
  check_yaml_error("- 1\n- 2\n", "bad.yaml:1:1: spec: expected a map of fields, got a sequence",
                   {"head_dim"});
  check_yaml_error("hello\n", "bad.yaml:1:1: spec: expected a map of fields, got 'hello'");
  check_yaml_error("", "bad.yaml:1:1: spec: the document is empty");
  check_yaml_error("# only a comment\n", "bad.yaml:1:1: spec: the document is empty");
}

TEST_CASE("spec errors: YAML syntax errors keep their position") {
  check_yaml_error("head_dim: [1\n", "bad.yaml:2:1: yaml: end of sequence flow not found");
  check_yaml_error("head_dim: 64\ncausal: a: b\n", "bad.yaml:2:10: yaml: illegal map value");
}

TEST_CASE("spec errors: wrong types name the field") {
  check_yaml_error("head_dim: 64\ncausal: yes please\n", "bad.yaml:2:9: causal: ",
                   {"expected true or false, got 'yes please'", "allowed: true, false"});
  check_yaml_error("head_dim: 64\ncausal: yes\n", "bad.yaml:2:9: causal: expected true or false");
  check_yaml_error("head_dim: 64\ncausal: \"true\"\n",
                   "bad.yaml:2:9: causal: expected true or false");
  check_yaml_error("head_dim: 12.5\n", "bad.yaml:1:11: head_dim: expected an integer, got '12.5'",
                   {"allowed: an integer in 1..512"});
  check_yaml_error("head_dim: [1]\n",
                   "bad.yaml:1:11: head_dim: expected an integer, got a sequence");
  check_yaml_error("head_dim: {a: 1}\n", "bad.yaml:1:11: head_dim: expected an integer, got a map");
  check_yaml_error("head_dim: \"100\"\n",
                   "bad.yaml:1:11: head_dim: expected an integer, got the quoted string \"100\"");
  check_yaml_error("head_dim:\n", "bad.yaml:1:1: head_dim: expected an integer, got no value");
  check_yaml_error("head_dim: 99999999999\n", "bad.yaml:1:11: head_dim: expected an integer");
  check_yaml_error("head_dim: 64\nname: [a]\n",
                   "bad.yaml:2:7: name: expected a name, got a sequence");
  check_yaml_error("head_dim: 64\ndtype: {a: 1}\n",
                   "bad.yaml:2:8: dtype: expected a word, got a map");
  check_yaml_error("head_dim: 64\nhopper: true\n",
                   "bad.yaml:2:9: hopper: expected a map, got 'true'",
                   {"allowed: a map with the key warp_specialization"});
  check_yaml_error("head_dim: 64\nhopper: {warp_specialization: 1}\n",
                   "bad.yaml:2:31: hopper.warp_specialization: expected true or false, got '1'");
  check_yaml_error("head_dim: 64\ntiles: big\n",
                   "bad.yaml:2:8: tiles: expected auto or a map, got 'big'");
  check_yaml_error("head_dim: 64\ntiles: {block_m: 64, block_n: 64, warps: four, stages: 2}\n",
                   "bad.yaml:2:42: tiles.warps: expected an integer, got 'four'",
                   {"allowed: 1, 2, 4, 8, 16"});
}

TEST_CASE("spec errors: head dims") {
  check_yaml_error("head_dim: 0\n", "bad.yaml:1:11: head_dim: 0 is out of range",
                   {"allowed: an integer in 1..512"});
  check_yaml_error("dtype: fp16\nhead_dim: 513\n", "bad.yaml:2:11: head_dim: 513 is out of range");
  check_yaml_error("head_dim_qk: 600\nhead_dim_v: 64\n",
                   "bad.yaml:1:14: head_dim_qk: 600 is out of range");
  check_yaml_error("head_dim_qk: 64\nhead_dim_v: -1\n",
                   "bad.yaml:2:13: head_dim_v: -1 is out of range");
  check_yaml_error("head_dim: 64\nhead_dim_qk: 64\n",
                   "bad.yaml:2:1: head_dim_qk: cannot be combined with head_dim (line 1)",
                   {"allowed: either head_dim, or both head_dim_qk and head_dim_v"});
  check_yaml_error("head_dim_v: 64\nhead_dim: 64\n",
                   "bad.yaml:1:1: head_dim_v: cannot be combined with head_dim (line 2)");
  check_yaml_error("dtype: bf16\nhead_dim_qk: 64\n",
                   "bad.yaml:2:1: head_dim_v: missing, head_dim_qk needs it");
  check_yaml_error("head_dim_v: 64\n", "bad.yaml:1:1: head_dim_qk: missing, head_dim_v needs it");
  check_yaml_error("dtype: bf16\ncausal: true\n", "bad.yaml:1:1: head_dim: missing",
                   {"allowed: either head_dim, or both head_dim_qk and head_dim_v"});
}

TEST_CASE("spec errors: enum values") {
  check_yaml_error("head_dim: 64\ndtype: fp8\n", "bad.yaml:2:8: dtype: fp8 is not supported yet",
                   {"allowed: fp16, bf16"});
  check_yaml_error("head_dim: 64\ndtype: fp32\n", "bad.yaml:2:8: dtype: unknown value 'fp32'");
  check_yaml_error("head_dim: 64\ndtype: bf61\n", "bad.yaml:2:8: dtype: unknown value 'bf61'",
                   {"did you mean 'bf16'?"});
  check_yaml_error("head_dim: 64\nmask: block_sparse\n",
                   "bad.yaml:2:7: mask: block_sparse needs its map: {block_q: BQ, block_k: BK}");
  check_yaml_error("head_dim: 64\nmask: pattern\n", "bad.yaml:2:7: mask: pattern needs its map");
  check_yaml_error("head_dim: 64\nmask: causal\n", "bad.yaml:2:7: mask: unknown value 'causal'");
  check_yaml_error("head_dim: 64\narch: sm_90a\n", "bad.yaml:2:7: arch: unknown value 'sm_90a'",
                   {"did you mean 'sm90a'?", "allowed: auto, sm80, sm90a"});
  check_yaml_error("head_dim: 64\narch: hopper\n", "bad.yaml:2:7: arch: unknown value 'hopper'");
}

TEST_CASE("spec: a sliding window") {
  const Spec spec = Spec::from_yaml(
      "head_dim: 128\ncausal: true\nmask: {sliding_window: {left: 1024, right: 0}}\n");
  CHECK(spec.mask == MaskKind::SlidingWindow);
  CHECK(spec.window_left == 1024);
  CHECK(spec.window_right == 0);
  CHECK(spec.name == "qk128_v128_bf16_causal_window1024_0");
  CHECK(spec.to_yaml().find("mask: {sliding_window: {left: 1024, right: 0}}") !=
        std::string::npos);
  check_same(Spec::from_yaml(spec.to_yaml()), spec);

  const Spec block = Spec::from_yaml("head_dim: 64\nmask:\n  sliding_window:\n    left: 7\n"
                                     "    right: 3\n");
  CHECK(block.window_left == 7);
  CHECK(block.window_right == 3);
  CHECK_FALSE(block.causal);
}

TEST_CASE("spec errors: sliding window") {
  check_yaml_error("head_dim: 64\nmask: sliding_window\n", "bad.yaml:2:7: mask: sliding_window "
                   "needs its map");
  check_yaml_error("head_dim: 64\nmask: {sliding_window: {left: 4}}\n",
                   "bad.yaml:2:24: mask.sliding_window: right missing from the map");
  check_yaml_error("head_dim: 64\nmask: {sliding_window: {left: -1, right: 0}}\n",
                   "bad.yaml:2:31: mask.sliding_window.left: -1 is negative");
  check_yaml_error("head_dim: 64\ncausal: true\nmask: {sliding_window: {left: 8, right: 2}}\n",
                   "bad.yaml:3:41: mask.sliding_window.right: 2 with causal: true",
                   {"allowed: an integer in 0..1073741824 (0 with causal)"});
  check_yaml_error("head_dim: 64\nmask: {sliding_window: {left: 1, rihgt: 0}}\n",
                   "bad.yaml:2:34: mask.sliding_window.rihgt: unknown key",
                   {"did you mean 'right'?"});
  check_yaml_error("head_dim: 64\nmask: {}\n", "bad.yaml:2:7: mask: 0 mask kinds given");

  Spec spec = valid_spec();
  spec.window_left = 3;
  CHECK(validate_error(spec).find("mask: window_left/window_right (3, 0) are set") == 0);
}

TEST_CASE("spec: block_sparse and the three patterns, resolved and printed back") {
  const Spec sparse = Spec::from_yaml(
      "head_dim: 64\ncausal: true\nmask: {block_sparse: {block_q: 128, block_k: 64}}\n");
  CHECK(sparse.mask == MaskKind::BlockSparse);
  CHECK(sparse.block_q == 128);
  CHECK(sparse.block_k == 64);
  CHECK(sparse.pattern == flashjit::PatternKind::None);
  CHECK(sparse.name == "qk64_v64_bf16_causal_bsparse128x64");
  CHECK(sparse.to_yaml().find("mask: {block_sparse: {block_q: 128, block_k: 64}}") !=
        std::string::npos);
  check_same(Spec::from_yaml(sparse.to_yaml()), sparse);

  const Spec local = Spec::from_yaml("head_dim: 64\nmask: {pattern: {kind: local, blocks: 2}}\n");
  CHECK(local.mask == MaskKind::Pattern);
  CHECK(local.pattern == flashjit::PatternKind::Local);
  CHECK(local.block_q == 128);  // the default block
  CHECK(local.block_k == 128);
  CHECK(local.pattern_window == 2);
  CHECK(local.name == "qk64_v64_bf16_local2b128");
  CHECK(local.to_yaml().find("mask: {pattern: {kind: local, block: 128, blocks: 2}}") !=
        std::string::npos);
  check_same(Spec::from_yaml(local.to_yaml()), local);

  const Spec strided =
      Spec::from_yaml("head_dim: 64\nmask: {pattern: {stride: 3, kind: strided, block: 32}}\n");
  CHECK(strided.pattern == flashjit::PatternKind::Strided);
  CHECK(strided.pattern_stride == 3);
  CHECK(strided.block_q == 32);
  CHECK(strided.name == "qk64_v64_bf16_strided3b32");
  check_same(Spec::from_yaml(strided.to_yaml()), strided);

  const Spec global = Spec::from_yaml(
      "head_dim: 64\nmask:\n  pattern:\n    kind: global_local\n    block: 64\n"
      "    global_blocks: 1\n    window_blocks: 0\n");
  CHECK(global.pattern == flashjit::PatternKind::GlobalLocal);
  CHECK(global.pattern_global == 1);
  CHECK(global.pattern_window == 0);
  CHECK(global.name == "qk64_v64_bf16_global1local0b64");
  CHECK(global.to_yaml().find("{pattern: {kind: global_local, block: 64, global_blocks: 1, "
                              "window_blocks: 0}}") != std::string::npos);
  check_same(Spec::from_yaml(global.to_yaml()), global);

  // Given tiles that fit the mask blocks are kept.
  const Spec tiled = Spec::from_yaml(
      "head_dim: 64\nmask: {block_sparse: {block_q: 128, block_k: 96}}\n"
      "tiles: {block_m: 64, block_n: 32, warps: 4, stages: 2}\n");
  CHECK(tiled.tiles == Tiles{64, 32, 4, 2});
}

TEST_CASE("spec errors: block_sparse and patterns") {
  check_yaml_error("head_dim: 64\nmask: {block_sparse: {block_q: 128}}\n",
                   "bad.yaml:2:22: mask.block_sparse: block_k missing from the map",
                   {"allowed: a map with both block_q and block_k"});
  check_yaml_error("head_dim: 64\nmask: {block_sparse: {block_q: 100, block_k: 64}}\n",
                   "bad.yaml:2:32: mask.block_sparse.block_q: 100 is not a multiple of 16");
  check_yaml_error("head_dim: 64\nmask: {block_sparse: {block_q: 64, block_k: 0}}\n",
                   "bad.yaml:2:45: mask.block_sparse.block_k: 0 is not a multiple of 16");
  check_yaml_error("head_dim: 64\nmask: {block_sparse: {block_q: 64, blocK_k: 64}}\n",
                   "bad.yaml:2:36: mask.block_sparse.blocK_k: unknown key",
                   {"did you mean 'block_k'?"});
  check_yaml_error("head_dim: 64\nmask: {block_sparse: 128}\n",
                   "bad.yaml:2:22: mask.block_sparse: expected a map, got '128'");
  check_yaml_error("head_dim: 64\nmask: {pattern: {blocks: 2}}\n",
                   "bad.yaml:2:17: mask.pattern: kind missing from the map");
  check_yaml_error("head_dim: 64\nmask: {pattern: {kind: locla, blocks: 2}}\n",
                   "bad.yaml:2:24: mask.pattern.kind: unknown value 'locla'",
                   {"did you mean 'local'?", "allowed: local, strided, global_local"});
  check_yaml_error("head_dim: 64\nmask: {pattern: {kind: local}}\n",
                   "bad.yaml:2:17: mask.pattern: blocks missing from the map (kind local)");
  check_yaml_error("head_dim: 64\nmask: {pattern: {kind: local, stride: 2}}\n",
                   "bad.yaml:2:31: mask.pattern.stride: not a key of kind local",
                   {"allowed: kind, block, blocks"});
  check_yaml_error("head_dim: 64\nmask: {pattern: {kind: global_local, global_blocks: 1}}\n",
                   "bad.yaml:2:17: mask.pattern: window_blocks missing from the map");
  check_yaml_error("head_dim: 64\nmask: {pattern: {kind: local, blocks: -1}}\n",
                   "bad.yaml:2:39: mask.pattern.blocks: -1 is negative");
  check_yaml_error("head_dim: 64\nmask: {pattern: {kind: strided, stride: 0}}\n",
                   "bad.yaml:2:41: mask.pattern.stride: 0 is below 1");
  check_yaml_error(
      "head_dim: 64\nmask: {pattern: {kind: global_local, global_blocks: 0, window_blocks: 1}}\n",
      "bad.yaml:2:53: mask.pattern.global_blocks: 0 is below 1");
  check_yaml_error("head_dim: 64\nmask: {pattern: {kind: local, block: 8, blocks: 1}}\n",
                   "bad.yaml:2:38: mask.pattern.block: 8 is not a multiple of 16");
  check_yaml_error("head_dim: 64\nmask: {pattern: {kind: local, blocks: 1}, block_sparse: "
                   "{block_q: 64, block_k: 64}}\n", "bad.yaml:2:7: mask: 2 mask kinds given");
  // Tiles must lie inside mask blocks: reported at the tile the user wrote.
  check_yaml_error("head_dim: 64\nmask: {block_sparse: {block_q: 64, block_k: 64}}\n"
                   "tiles: {block_m: 128, block_n: 64, warps: 4, stages: 2}\n",
                   "bad.yaml:3:18: tiles.block_m: block_m 128 does not divide the mask's block_q 64",
                   {"allowed: a divisor of the mask's block_q"});
  check_yaml_error("head_dim: 64\nmask: {pattern: {kind: local, block: 48, blocks: 1}}\n"
                   "tiles: {block_m: 48, block_n: 32, warps: 1, stages: 2}\n",
                   "bad.yaml:3:31: tiles.block_n: block_n 32 does not divide the mask's block_k 48");

  // C++-built specs: the fields of one mask kind are refused under another.
  Spec spec = valid_spec();
  spec.block_q = 64;
  CHECK(validate_error(spec).find("mask: block_q/block_k/pattern fields are set but the mask "
                                  "is none") == 0);
  spec.mask = MaskKind::BlockSparse;
  spec.block_k = 64;
  spec.pattern_stride = 2;
  CHECK(validate_error(spec).find("mask: pattern fields are set but the mask is block_sparse") ==
        0);
  spec.mask = MaskKind::Pattern;
  spec.pattern_stride = 0;
  CHECK(validate_error(spec).find("mask.pattern.kind: missing") == 0);
  spec.pattern = flashjit::PatternKind::Local;
  spec.block_k = 32;
  CHECK(validate_error(spec).find("mask.pattern.block: block_q 64 and block_k 32 differ") == 0);
  spec.block_k = 64;
  spec.pattern_stride = 2;
  CHECK(validate_error(spec).find("mask.pattern.kind: pattern_stride is set but the kind is "
                                  "local") == 0);
  spec.pattern_stride = 0;
  CHECK(validate_error(spec).empty());
}

TEST_CASE("spec errors: names") {
  check_yaml_error("name: has space\nhead_dim: 64\n",
                   "bad.yaml:1:7: name: 'has space' contains the character ' '",
                   {"allowed: 1 to 64 characters from A-Z a-z 0-9 _ -"});
  check_yaml_error("name: " + std::string(65, 'a') + "\nhead_dim: 64\n",
                   "bad.yaml:1:7: name: '" + std::string(65, 'a') + "' has 65 characters");
  CHECK(Spec::from_yaml("name: " + std::string(64, 'a') + "\nhead_dim: 64\n").name.size() == 64);
  check_yaml_error("name: \"\"\nhead_dim: 64\n", "bad.yaml:1:7: name: is empty");
}

TEST_CASE("spec errors: tiles") {
  auto tiles = [](const std::string& map) { return "head_dim: 64\ntiles: " + map + "\n"; };
  check_yaml_error(tiles("{block_m: 64, warps: 4}"),
                   "bad.yaml:2:8: tiles: block_n, stages missing from the map",
                   {"allowed: auto, or a map with all of block_m, block_n, warps, stages"});
  check_yaml_error(tiles("{block_m: 100, block_n: 64, warps: 4, stages: 2}"),
                   "bad.yaml:2:18: tiles.block_m: 100 is not a multiple of 16 in 16..256");
  check_yaml_error(tiles("{block_m: 0, block_n: 64, warps: 4, stages: 2}"),
                   "bad.yaml:2:18: tiles.block_m: 0 is not a multiple of 16");
  // All zero is "auto" in C++, but written as a map it asks for impossible tiles.
  check_yaml_error(tiles("{block_m: 0, block_n: 0, warps: 0, stages: 0}"),
                   "bad.yaml:2:18: tiles.block_m: 0 is not a multiple of 16");
  check_yaml_error(tiles("{block_m: 64, block_n: 272, warps: 4, stages: 2}"),
                   "bad.yaml:2:31: tiles.block_n: 272 is not a multiple of 16 in 16..256",
                   {"allowed: a multiple of 16 in 16..256"});
  check_yaml_error(tiles("{block_m: 64, block_n: 64, warps: 3, stages: 2}"),
                   "bad.yaml:2:42: tiles.warps: 3 is not a supported warp count",
                   {"allowed: 1, 2, 4, 8, 16"});
  check_yaml_error(tiles("{block_m: 64, block_n: 64, warps: 4, stages: 5}"),
                   "bad.yaml:2:53: tiles.stages: 5 is out of range",
                   {"allowed: an integer in 1..4"});
  check_yaml_error(tiles("{block_m: 64, block_n: 64, warps: 4, stages: 0}"),
                   "bad.yaml:2:53: tiles.stages: 0 is out of range");
  check_yaml_error(tiles("{block_m: 64, block_n: 64, warps: 8, stages: 2}"),
                   "bad.yaml:2:18: tiles.block_m: 64 rows cannot be split into whole 16-row tiles "
                   "over 8 warps");
  CHECK(Spec::from_yaml(tiles("{block_m: 256, block_n: 16, warps: 16, stages: 4}")).tiles ==
        Tiles{256, 16, 16, 4});
}

TEST_CASE("spec: from_file") {
  Spec spec = Spec::from_file(FLASHJIT_SOURCE_DIR "/configs/hd100_causal_bf16.yaml");
  CHECK(spec.name == "hd100_causal_bf16");
  CHECK(spec.causal);

  std::string missing = FLASHJIT_SOURCE_DIR "/configs/no_such_spec.yaml";
  try {
    Spec::from_file(missing);
    FAIL("no error for a missing file");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Io);
    CHECK(std::string(e.what()).find(missing) != std::string::npos);
  }
  CHECK_THROWS_AS(Spec::from_file(FLASHJIT_SOURCE_DIR "/configs"), Error);

  // Errors in a file name the file.
  auto path = std::filesystem::temp_directory_path() / "flashjit_test_spec_typo.yaml";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fputs("head_dim: 64\ncasual: true\n", f);
    std::fclose(f);
  }
  try {
    Spec::from_file(path.string());
    FAIL("no error for a typo");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Spec);
    CHECK(std::string(e.what()).rfind(path.string() + ":2:1: casual: unknown key", 0) == 0);
  }
  std::filesystem::remove(path);
}

TEST_CASE("spec: validate() checks specs built in C++") {
  CHECK_NOTHROW(valid_spec().validate());

  Spec spec = valid_spec();
  spec.head_dim_qk = 0;
  CHECK(validate_error(spec) == "head_dim_qk: 0 is out of range; allowed: an integer in 1..512");
  spec = valid_spec();
  spec.head_dim_v = 513;
  CHECK(validate_error(spec).rfind("head_dim_v: 513 is out of range", 0) == 0);
  spec = valid_spec();
  spec.name = "a/b";
  CHECK(validate_error(spec).rfind("name: 'a/b' contains the character '/'", 0) == 0);
  spec = valid_spec();
  spec.tiles = Tiles{0, 64, 4, 2};  // half-filled: block_m 0 is not "auto" here
  CHECK(validate_error(spec).rfind("tiles.block_m: 0 is not a multiple of 16", 0) == 0);
  spec.tiles = Tiles{128, 64, 4, 0};
  CHECK(validate_error(spec).rfind("tiles.stages: 0 is out of range", 0) == 0);
  spec.tiles = Tiles{32, 64, 4, 2};
  CHECK(validate_error(spec).rfind("tiles.block_m: 32 rows cannot be split", 0) == 0);
  spec.tiles = Tiles{128, 64, 4, 2};
  CHECK_NOTHROW(spec.validate());
  spec.dtype = static_cast<DType>(7);
  CHECK(validate_error(spec).rfind("dtype: 7 is not a DType", 0) == 0);
}

TEST_CASE("spec: to_yaml prints every field resolved and round-trips") {
  Spec spec = valid_spec();
  spec.causal = true;
  std::string text = spec.to_yaml();
  for (const char* line :
       {"name: qk100_v100_bf16_causal\n", "head_dim_qk: 100\n", "head_dim_v: 100\n",
        "dtype: bf16\n", "causal: true\n", "mask: none\n", "arch: auto\n",
        "hopper: {warp_specialization: true}\n", "tiles: auto\n"})
    CHECK_MESSAGE(text.find(line) != std::string::npos, text);

  Spec full;
  full.name = "full-spec_1";
  full.head_dim_qk = 192;
  full.head_dim_v = 128;
  full.dtype = DType::F16;
  full.arch = Arch::Sm90a;
  full.warp_specialization = true;
  full.tiles = Tiles{128, 64, 4, 3};
  CHECK(full.to_yaml().find("tiles: {block_m: 128, block_n: 64, warps: 4, stages: 3}") !=
        std::string::npos);
  check_same(Spec::from_yaml(full.to_yaml()), full);

  Spec parsed = Spec::from_yaml("head_dim: 72\ncausal: true\narch: sm80\n");
  check_same(Spec::from_yaml(parsed.to_yaml()), parsed);
  CHECK(Spec::from_yaml(parsed.to_yaml()).to_yaml() == parsed.to_yaml());
}

TEST_CASE("spec: every shipped config parses, is named after its file, and round-trips") {
  std::vector<std::string> stems;
  for (const auto& entry : std::filesystem::directory_iterator(FLASHJIT_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    std::string stem = entry.path().stem().string();
    INFO("config: ", entry.path().string());
    Spec spec = Spec::from_file(entry.path().string());
    CHECK(spec.name == stem);
    CHECK(spec.tiles.is_auto());
    CHECK(spec.arch == Arch::Auto);
    CHECK(spec.warp_specialization);
    check_same(Spec::from_yaml(spec.to_yaml()), spec);
    stems.push_back(stem);
  }
  for (const char* required :
       {"hd64",  "hd64_causal",  "hd128",      "hd128_causal", "hd128_fp16",
        "hd256", "hd256_causal", "hd1",        "hd8",          "hd40",
        "hd72",  "hd80",         "hd96",       "hd100",        "hd100_causal_bf16",
        "hd112", "hd136",        "hd160",      "hd192",        "hd200",
        "hd320", "hd512",        "qk192_v128", "qk128_v64",    "qk64_v256"}) {
    INFO("required config: ", required);
    CHECK(std::find(stems.begin(), stems.end(), required) != stems.end());
  }
}

TEST_CASE("ForwardArgs::contiguous: dense strides in the FlashAttention layout") {
  Spec spec = Spec::from_yaml("head_dim_qk: 192\nhead_dim_v: 128\n");
  ForwardArgs args = ForwardArgs::contiguous(spec, 3, 8, 2, 1000, 4097);
  CHECK(args.batch == 3);
  CHECK(args.heads_q == 8);
  CHECK(args.heads_kv == 2);
  CHECK(args.seqlen_q == 1000);
  CHECK(args.seqlen_k == 4097);
  CHECK(args.q == nullptr);
  CHECK(args.k == nullptr);
  CHECK(args.v == nullptr);
  CHECK(args.o == nullptr);
  CHECK(args.lse == nullptr);
  CHECK(args.softmax_scale == 0.f);
  CHECK(args.q_stride.batch == 1000 * 8 * 192);
  CHECK(args.q_stride.seq == 8 * 192);
  CHECK(args.q_stride.head == 192);
  CHECK(args.k_stride.batch == 4097 * 2 * 192);
  CHECK(args.k_stride.seq == 2 * 192);
  CHECK(args.k_stride.head == 192);
  CHECK(args.v_stride.batch == 4097 * 2 * 128);
  CHECK(args.v_stride.seq == 2 * 128);
  CHECK(args.v_stride.head == 128);
  CHECK(args.o_stride.batch == 1000 * 8 * 128);
  CHECK(args.o_stride.seq == 8 * 128);
  CHECK(args.o_stride.head == 128);
  // Strides are 64-bit: large tensors must not overflow.
  ForwardArgs big =
      ForwardArgs::contiguous(Spec::from_yaml("head_dim: 512"), 1, 64, 64, 1 << 17, 1);
  CHECK(big.q_stride.batch == int64_t(1) << 32);
}

TEST_CASE("names: enum spellings and version") {
  using flashjit::to_string;
  CHECK(std::string(to_string(DType::F16)) == "fp16");
  CHECK(std::string(to_string(DType::BF16)) == "bf16");
  CHECK(std::string(to_string(Arch::Auto)) == "auto");
  CHECK(std::string(to_string(Arch::Sm80)) == "sm80");
  CHECK(std::string(to_string(Arch::Sm90a)) == "sm90a");
  CHECK(std::string(to_string(ErrorKind::Spec)) == "spec");
  CHECK(std::string(to_string(ErrorKind::NoDevice)) == "no-device");
  CHECK(std::string(flashjit::version()) == "0.1.0");
}
