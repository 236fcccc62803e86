// Specs read exactly as written (issue 18, items 4-7): one YAML document, any line break,
// decimal integers, and windows and block counts bounded so that no int arithmetic overflows.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "flashjit/flashjit.h"
#include "verify/reference.h"

using flashjit::Error;
using flashjit::MaskKind;
using flashjit::PatternKind;
using flashjit::Spec;

namespace {

// The message of the Error that parsing `text` as "bad.yaml" throws ("" if none).
std::string error_of(const std::string& text) {
  try {
    Spec::from_yaml(text, "bad.yaml");
  } catch (const Error& e) {
    CHECK(e.kind() == flashjit::ErrorKind::Spec);
    return e.what();
  }
  return "";
}

// Parsing fails with a message that starts with `head` and says what is allowed.
void check_refused(const std::string& text, const std::string& head) {
  const std::string message = error_of(text);
  INFO("yaml: ", text, "\nmessage: ", message);
  CHECK(message.rfind(head, 0) == 0);
  CHECK(message.find("; allowed: ") != std::string::npos);
}

std::string window(long long left, long long right) {
  return "head_dim: 64\nmask: {sliding_window: {left: " + std::to_string(left) +
         ", right: " + std::to_string(right) + "}}\n";
}

}  // namespace

TEST_CASE("spec reading: exactly one YAML document") {
  check_refused("head_dim: 64\n---\nhead_dim: 32\n", "bad.yaml:2:1: yaml: a second document");
  check_refused("head_dim: 64\n---\n", "bad.yaml:2:1: yaml: a second document");
  check_refused("head_dim: 64\n...\ngarbage ]]\n",
                "bad.yaml:2:1: yaml: text after a document end");
  check_refused("head_dim: 64\n...\n", "bad.yaml:2:1: yaml: text after a document end");
  check_refused("head_dim: 64\n%YAML 1.2\ncausal: true\n", "bad.yaml:2:1: yaml: a directive");
  check_refused("%YAML 1.2\n---\nhead_dim: 64\n", "bad.yaml:1:1: yaml: a directive");
  check_refused("head_dim: 64\n%foo\n", "bad.yaml:2:1: yaml: a directive");
  // A leading start marker is one document; markers inside a line or a comment are text.
  CHECK(Spec::from_yaml("---\nhead_dim: 64\n").head_dim_qk == 64);
  CHECK(Spec::from_yaml("# a spec\n--- # starts here\nhead_dim: 64\ncausal: true\n").causal);
  CHECK(Spec::from_yaml("head_dim: 64 # --- and ... and %\nname: a---b\n").name == "a---b");
  // Not a mapping: refused as before.
  check_refused("--- [1, 2]\n", "bad.yaml:1:5: spec: expected a map");
}

TEST_CASE("spec reading: CR and CRLF line breaks read as LF") {
  // A lone CR used to make one line of the file, so the comment hid causal: true.
  const Spec cr = Spec::from_yaml("# kernel\rhead_dim: 64\rcausal: true\r");
  CHECK(cr.causal);
  CHECK(cr.head_dim_qk == 64);
  const Spec crlf = Spec::from_yaml("# kernel\r\nhead_dim: 64\r\ncausal: true\r\n");
  CHECK(crlf.causal);
  const Spec mixed = Spec::from_yaml("head_dim: 64\r\ndtype: fp16\rcausal: true\n");
  CHECK(mixed.causal);
  CHECK(mixed.dtype == flashjit::DType::F16);
  // Errors count every kind of break as a line.
  check_refused("head_dim: 64\rcasual: true\r", "bad.yaml:2:1: casual: unknown key");
  check_refused("head_dim: 64\r\n\r\ncausal: maybe\r\n", "bad.yaml:3:9: causal:");
  check_refused("head_dim: 64\r---\rhead_dim: 8\r", "bad.yaml:2:1: yaml: a second document");
}

TEST_CASE("spec reading: integers are decimal") {
  CHECK(Spec::from_yaml("head_dim: 064\n").head_dim_qk == 64);  // YAML 1.2, not octal 52
  CHECK(Spec::from_yaml("head_dim: +64\n").head_dim_qk == 64);
  const Spec tiles = Spec::from_yaml(
      "head_dim: 64\ntiles: {block_m: 0128, block_n: 064, warps: 04, stages: 02}\n");
  CHECK(tiles.tiles.block_m == 128);
  CHECK(tiles.tiles.block_n == 64);
  CHECK(tiles.tiles.warps == 4);
  CHECK(Spec::from_yaml(window(0, 10)).window_right == 10);
  for (const char* text : {"0x40", "0o100", "1_000", "6.4e1", "64.0", "--64", "+-64", "+",
                           "99999999999", "0100000000000"}) {
    INFO(text);
    check_refused(std::string("head_dim: ") + text + "\n",
                  "bad.yaml:1:11: head_dim: expected an integer");
  }
  check_refused("head_dim: -064\n", "bad.yaml:1:11: head_dim: -64 is out of range");
}

TEST_CASE("spec reading: flashjit check reads 064 as 64 and CR breaks as lines") {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() /
      ("flashjit_spec_reading_" + std::to_string(getpid()) + ".yaml");
  std::ofstream(file, std::ios::binary) << "# a comment\rhead_dim: 064\rcausal: true\r";
  const std::string command = std::string("'") + FLASHJIT_CLI_PATH + "' check '" +
                              file.string() + "' 2>&1";
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[256];
    while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
    CHECK(pclose(pipe) == 0);
  }
  std::filesystem::remove(file);
  INFO(out);
  CHECK(out.find("head_dim_qk: 64\n") != std::string::npos);
  CHECK(out.find("causal: true\n") != std::string::npos);
}

TEST_CASE("spec reading: windows and block counts are bounded at 2^30") {
  constexpr long long kBound = 1 << 30;
  CHECK(Spec::from_yaml(window(kBound, kBound)).window_left == kBound);
  check_refused(window(kBound + 1, 0),
                "bad.yaml:2:31: mask.sliding_window.left: 1073741825 is above 1073741824");
  check_refused(window(0, kBound + 1),
                "bad.yaml:2:41: mask.sliding_window.right: 1073741825 is above 1073741824");
  check_refused(window(INT_MAX, 0),
                "bad.yaml:2:31: mask.sliding_window.left: 2147483647 is above 1073741824");
  const std::string pattern = "head_dim: 64\nmask: {pattern: {kind: ";
  CHECK(Spec::from_yaml(pattern + "local, blocks: 1073741824}}\n").pattern_window == kBound);
  check_refused(pattern + "local, blocks: 1073741825}}\n", "bad.yaml:2:39: mask.pattern.blocks:");
  check_refused(pattern + "strided, stride: 2147483647}}\n",
                "bad.yaml:2:41: mask.pattern.stride: 2147483647 is above");
  check_refused(pattern + "global_local, global_blocks: 1073741825, window_blocks: 1}}\n",
                "bad.yaml:2:53: mask.pattern.global_blocks:");
  check_refused(pattern + "global_local, global_blocks: 1, window_blocks: 1073741825}}\n",
                "bad.yaml:2:71: mask.pattern.window_blocks:");
  // The same bounds for specs built in C++.
  Spec spec;
  spec.head_dim_qk = spec.head_dim_v = 64;
  spec.mask = MaskKind::Pattern;
  spec.pattern = PatternKind::Strided;
  spec.block_q = spec.block_k = 128;
  spec.pattern_stride = INT_MAX;
  CHECK_THROWS_WITH_AS(spec.validate(),
                       doctest::Contains("mask.pattern.stride: 2147483647 is above"), Error);
  spec.pattern_stride = kBound;
  CHECK_NOTHROW(spec.validate());
}

TEST_CASE("spec reading: the reference's arithmetic holds at the bounds") {
  // Rows of sequences far longer than any test's, with windows at the bound: the key range
  // is clamped, not wrapped around (an overflow made first_key huge and end_key negative).
  flashjit::verify::AttentionProblem p;
  p.seqlen_q = 1 << 20;
  p.seqlen_k = 1 << 29;
  p.window = true;
  p.window_left = 1 << 30;
  p.window_right = 1 << 30;
  CHECK(p.first_key(0) == 0);
  CHECK(p.end_key(p.seqlen_q - 1) == p.seqlen_k);
  const Spec spec =
      Spec::from_yaml("head_dim: 64\nmask: {pattern: {kind: local, blocks: 1073741824}}\n");
  const auto visible = flashjit::verify::pattern_block_matrix(spec, 4, 4);
  CHECK(std::count(visible.begin(), visible.end(), 1) == 16);
}
