// The embedded templates: their layers (arch < tile < attn < kernels, each including only its
// own layer or lower ones), include paths resolved as a compiler resolves them, each code
// path's program holding the headers that path uses and no other, and the arch headers'
// target guards.
#include <doctest/doctest.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/emit.h"
#include "generator/plan.h"
#include "generator/templates.h"
#include "runtime/nvrtc_compiler.h"

namespace flashjit::gen {
namespace {

const std::vector<std::string> kLayers = {"arch", "tile", "attn", "kernels"};

// The layer's rank in kLayers, or -1 for a name outside every layer.
int layer_of(const std::string& name) {
  for (size_t i = 0; i < kLayers.size(); ++i)
    if (name.rfind(kLayers[i] + "/", 0) == 0) return static_cast<int>(i);
  return -1;
}

// The `#include "x"` paths of a template's text.
std::vector<std::string> includes_of(std::string_view text) {
  static const std::regex include(R"re(^\s*#include "([^"]+)")re");
  std::vector<std::string> out;
  std::istringstream lines{std::string(text)};
  std::smatch m;
  for (std::string line; std::getline(lines, line);)
    if (std::regex_search(line, m, include)) out.push_back(m[1].str());
  return out;
}

// The templates inlined into a generated source, from its "// ---- templates/x" markers.
std::set<std::string> inlined(const std::string& source) {
  static const std::regex marker(R"(// ---- templates/(\S+))");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(source.begin(), source.end(), marker);
       it != std::sregex_iterator(); ++it)
    out.insert((*it)[1].str());
  return out;
}

Spec spec_from(const std::string& yaml) { return Spec::from_yaml(yaml, "test.yaml"); }

}  // namespace

TEST_CASE("templates: an include is resolved from the including file's folder") {
  CHECK(included_template_name("kernels/fwd_sm80.cuh", "../arch/sm80.cuh") == "arch/sm80.cuh");
  CHECK(included_template_name("kernels/fwd_sm80.cuh", "fwd_params.cuh") ==
        "kernels/fwd_params.cuh");
  CHECK(included_template_name("arch/sm90.cuh", "./common.cuh") == "arch/common.cuh");
  CHECK_THROWS_AS(included_template_name("kernels/fwd_sm80.cuh", "../../runtime/x.h"), Error);
  CHECK_THROWS_AS(included_template_name("arch/common.cuh", "/usr/include/stdio.h"), Error);
}

TEST_CASE("templates: every template lies in a layer and includes only its layer or lower") {
  const auto& all = embedded_templates();
  REQUIRE(all.size() >= 10);
  std::set<std::string> names;
  for (const auto& t : all) names.insert(t.name);
  for (const auto& t : all) {
    CAPTURE(t.name);
    const int layer = layer_of(t.name);
    CHECK(layer >= 0);
    CHECK(t.text.find("#pragma once") != std::string::npos);
    for (const std::string& path : includes_of(t.text)) {
      CAPTURE(path);
      const std::string target = included_template_name(t.name, path);
      CHECK(names.count(target) == 1);
      CHECK(layer_of(target) <= layer);
    }
  }
  CHECK(template_text("kernels/fwd_sm80.cuh").find("fwd_sm80") != std::string_view::npos);
  CHECK_THROWS_AS(template_text("fwd_sm80.cuh"), Error);
}

TEST_CASE("templates: each path's program holds its own headers, each once") {
  const Spec spec = spec_from("head_dim: 128\ncausal: true\n");
  const std::string sm80 = emit_source(make_plan(spec, "sm_80"));
  const std::string sm90 = emit_source(make_plan(spec, "sm_90a"));
  const std::set<std::string> in80 = inlined(sm80), in90 = inlined(sm90);

  CHECK(in80.count("kernels/fwd_sm80.cuh") == 1);
  CHECK(in80.count("arch/sm80.cuh") == 1);
  CHECK(in80.count("tile/load.cuh") == 1);
  CHECK(in80.count("kernels/fwd_sm90.cuh") == 0);
  CHECK(in80.count("arch/sm90.cuh") == 0);

  CHECK(in90.count("kernels/fwd_sm90.cuh") == 1);
  CHECK(in90.count("arch/sm90.cuh") == 1);
  CHECK(in90.count("kernels/fwd_sm80.cuh") == 0);
  CHECK(in90.count("arch/sm80.cuh") == 0);  // no cp.async, ldmatrix or mma.sync
  CHECK(in90.count("tile/load.cuh") == 0);

  // Shared layers appear in both, and no template is inlined twice (#pragma once).
  for (const char* shared : {"attn/key_blocks.cuh", "attn/softmax.cuh", "tile/element.cuh",
                             "kernels/fwd_params.cuh", "attn/params.cuh"}) {
    CAPTURE(shared);
    CHECK(in80.count(shared) == 1);
    CHECK(in90.count(shared) == 1);
  }
  for (const std::string* src : {&sm80, &sm90})
    for (const std::string& name : inlined(*src)) {
      const std::string marker = "// ---- templates/" + name + "\n";
      CHECK(src->find(marker) == src->rfind(marker));
    }
}

// NVRTC stops at the arch header's #error, before any of the kernel's code is compiled.
TEST_CASE("templates: a program for the wrong target stops at its arch header's #error") {
  const Spec spec = spec_from("head_dim: 64\n");
  const auto error_for = [](const std::string& source, const char* target) -> std::string {
    try {
      rt::nvrtc_compile(source, "wrong_target.cu", target);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Compile);
      return e.what();
    }
    return "";
  };
  CHECK(error_for(emit_source(make_plan(spec, "sm_90a")), "sm_90")
            .find("arch/sm90.cuh needs the target sm_90a") != std::string::npos);
  CHECK(error_for(emit_source(make_plan(spec, "sm_80")), "sm_75")
            .find("arch/sm80.cuh needs sm_80 or later") != std::string::npos);
}

}  // namespace flashjit::gen
