// The spec's field table (generator/spec_fields.h): every row parsed, printed and hashed, the
// shipped configs round-tripped, and the tune key pinned to the hashes it had before the table.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/spec_fields.h"
#include "runtime/tune_key.h"

using flashjit::Arch;
using flashjit::DecodeMode;
using flashjit::DType;
using flashjit::MaskKind;
using flashjit::PatternKind;
using flashjit::Spec;
namespace gen = flashjit::gen;

namespace {

const std::string kConfigs = std::string(FLASHJIT_SOURCE_DIR) + "/configs";

// Specs that between them give every row of the table a value of its own.
const char* const kSamples[] = {
    "name: every_top_field\nhead_dim_qk: 96\nhead_dim_v: 64\ndtype: fp16\ncausal: true\n"
    "mask: {sliding_window: {left: 300, right: 0}}\narch: sm90a\n"
    "hopper: {warp_specialization: false}\n"
    "tiles: {block_m: 64, block_n: 32, warps: 4, stages: 3}\n",
    "head_dim: 64\nmask: {block_sparse: {block_q: 256, block_k: 64}}\n",
    "head_dim: 64\nmask: {pattern: {kind: local, block: 64, blocks: 3}}\n",
    "head_dim: 64\nmask: {pattern: {kind: strided, stride: 5}}\n",
    "head_dim: 64\nmask: {pattern: {kind: global_local, global_blocks: 2, window_blocks: 4}}\n",
    "head_dim: 64\nmask: none\ntiles: auto\n",
};

// The dotted paths of every key in a YAML tree.
void collect_paths(const YAML::Node& node, const std::string& prefix, std::set<std::string>& out) {
  if (!node.IsMap()) return;
  for (const auto& item : node) {
    const std::string path = prefix + item.first.Scalar();
    out.insert(path);
    collect_paths(item.second, path + ".", out);
  }
}

// The scalar at a dotted path of a YAML tree.
std::string scalar_at(YAML::Node node, const std::string& path) {
  size_t begin = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', begin)) {
    node.reset(node[path.substr(begin, dot - begin)]);
    begin = dot + 1;
  }
  return node[path.substr(begin)].Scalar();
}

// A spec whose member differs from `spec`'s (for the hash): integers +16, enums and booleans
// switched to another value.
Spec with_other_value(Spec spec, const gen::Member& member) {
  gen::MemberValue value = gen::value_of(spec, member);
  std::visit(
      [](auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int>) v += 16;
        else if constexpr (std::is_same_v<T, bool>) v = !v;
        else if constexpr (std::is_same_v<T, DType>) v = v == DType::F16 ? DType::BF16 : DType::F16;
        else if constexpr (std::is_same_v<T, Arch>) v = v == Arch::Auto ? Arch::Sm80 : Arch::Auto;
        else if constexpr (std::is_same_v<T, MaskKind>)
          v = v == MaskKind::None ? MaskKind::BlockSparse : MaskKind::None;
        else if constexpr (std::is_same_v<T, PatternKind>)
          v = v == PatternKind::Local ? PatternKind::Strided : PatternKind::Local;
        else if constexpr (std::is_same_v<T, DecodeMode>)
          v = v == DecodeMode::Auto ? DecodeMode::Never : DecodeMode::Auto;
        else v += "x";
      },
      value);
  gen::assign(spec, member, value);
  return spec;
}

}  // namespace

TEST_CASE("spec fields: every shipped config round-trips through parse, print, parse") {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigs)) {
    if (entry.path().extension() != ".yaml") continue;
    INFO(entry.path().string());
    const Spec first = Spec::from_file(entry.path().string());
    const std::string printed = first.to_yaml();
    const Spec second = Spec::from_yaml(printed, "printed");
    CHECK(gen::same_spec_fields(first, second));
    CHECK(second.to_yaml() == printed);
    CHECK(flashjit::tune::spec_hash(second) == flashjit::tune::spec_hash(first));
    ++count;
  }
  CHECK(count >= 30);
}

TEST_CASE("spec fields: every row is parsed and printed") {
  std::set<std::string> printed;
  for (const char* text : kSamples) {
    INFO(text);
    const Spec spec = Spec::from_yaml(text);
    collect_paths(YAML::Load(spec.to_yaml()), "", printed);
    const Spec again = Spec::from_yaml(spec.to_yaml());
    CHECK(gen::same_spec_fields(spec, again));
    // What the samples wrote is what was read: their own keys print back with their values.
    std::set<std::string> written;
    collect_paths(YAML::Load(text), "", written);
    for (const std::string& path : written) {
      const gen::SpecField* row = gen::find_spec_field(path);
      REQUIRE_MESSAGE(row != nullptr, path);
      if (row->node != gen::Node::Value) continue;
      if (!row->alias_of.empty()) {  // head_dim: read into the rows it stands for
        for (std::string_view target : row->alias_of)
          CHECK(gen::value_of(spec, gen::find_spec_field(target)->members[0]) ==
                gen::value_of(spec, gen::find_spec_field("head_dim_qk")->members[0]));
        continue;
      }
      CHECK_MESSAGE(
          scalar_at(YAML::Load(text), path) == scalar_at(YAML::Load(spec.to_yaml()), path), path);
    }
  }
  for (const gen::SpecField& row : gen::spec_fields()) {
    INFO(row.path);
    CHECK(!row.allowed.empty());
    if (row.alias_of.empty()) CHECK(printed.count(std::string(row.path)) == 1);
  }
  // head_dim is an alias: read, never printed.
  const Spec spec = Spec::from_yaml("head_dim: 77\n");
  CHECK(spec.head_dim_qk == 77);
  CHECK(spec.head_dim_v == 77);
  CHECK(printed.count("head_dim") == 0);
}

TEST_CASE("spec fields: every hashed row changes the tune key, and the others do not") {
  const Spec base = Spec::from_yaml(kSamples[0]);
  std::set<std::string_view> hashed_keys;
  for (const gen::SpecField& row : gen::spec_fields()) {
    if (row.members.empty()) continue;
    INFO(row.path);
    const Spec changed = with_other_value(base, row.members[0]);
    // A row is in the key when it or another row writing its member has a hash key.
    bool hashed = false;
    for (const gen::SpecField& other : gen::spec_fields())
      if (!other.hash_key.empty() && !other.members.empty() &&
          other.members[0] == row.members[0])
        hashed = true;
    CHECK((flashjit::tune::spec_hash(changed) != flashjit::tune::spec_hash(base)) == hashed);
    if (!row.hash_key.empty()) {
      CHECK(hashed_keys.insert(row.hash_key).second);  // each member once
      CHECK(gen::canonical_spec_fields(base).find(std::string(row.hash_key) + "=") !=
            std::string::npos);
    }
  }
  CHECK(hashed_keys.size() == 15);
}

TEST_CASE("spec fields: the tune key of every shipped config is the one it had before the table") {
  // Computed with main at 3a6d8d4 (tune::spec_hash before the field table). A change here
  // orphans every tune DB entry: bump the version in spec_hash() instead of editing these.
  const std::pair<const char*, const char*> kPinned[] = {
      {"hd1.yaml", "eab897ce2f7d969fb964a60e6ee91b9298d462f1489c460e5c7c3b8c14bad671"},
      {"hd100.yaml", "3c7854f280a2e2fc4f43d33030a1538931bd5d7b02c8393fb189ef27a12e42fb"},
      {"hd100_causal_bf16.yaml",
       "c4bb11973a202a5c390886ea66699d64be9348e114bca01505491e0455009121"},
      {"hd100_window.yaml", "a9fa0d21b5b3e545235a840e922f33c4ad16568532515a948591d4ac1ac5f883"},
      {"hd112.yaml", "15ac0f81d2e5dadb8ab74d4281df4e74a78fea3632ca6db45d229294d9c29478"},
      {"hd128.yaml", "6e233c4081d7f2a5e723ed48bbb31d2606b46c0419886e17256ddec40e00d559"},
      {"hd128_block_sparse_causal.yaml",
       "9405801eafedbd80604aafb1b7883c7eb2c6576e81b9759218f3543a4e737f8f"},
      {"hd128_causal.yaml", "a1bdcad9041e60814f9997b9601025894a5be288790b729f5d2eee1ac9931e85"},
      {"hd128_fp16.yaml", "fca727ad248765276413975a272e1c539c5102254c38fa2e6b47f0bdc4b220db"},
      {"hd128_global_local.yaml",
       "8405daac7db4a1160c8a210ce303da576fd812fa34379c042f3cd15806a5de84"},
      {"hd128_window1000_causal.yaml",
       "27646fd4a80f4857567d60efc500cc276917afff5998c135c71a9e03fd1baf0f"},
      {"hd136.yaml", "7d04be987b754b17c0adca52aa25e74d13de30cef074ca455ed936ddc040d133"},
      {"hd136_fp16.yaml", "5c2abbdfabba48e7036baca0469aecd6c71a7ac0b925e75b57b80a3dbc43815a"},
      {"hd160.yaml", "4e0b09ffa7555335c258c92405a25ed01002a364db7c904ccc9d30c8732280f7"},
      {"hd192.yaml", "71ba9986c3b065dc8a8c5ccbac780bfdbb88873326eadfd400d4c8b7663e0263"},
      {"hd200.yaml", "c774a6e3aaed5aee23cb81918b2209cc1579f42432ed7b665c39541ce1b06be1"},
      {"hd256.yaml", "e7a641eee3d66a82686cb23f5279533247494d816a13fffaf0066bfe3ca3806c"},
      {"hd256_causal.yaml", "3a9084848f2a0a4cf0f75eaebc20784c9a58e3b857ea8fdcfe9088219a472b19"},
      {"hd320.yaml", "4541d63f9c1236f289d270bad33f939882ebe7532c97eea15367250fb60f92ae"},
      {"hd40.yaml", "4132f699dad596a097e027d013c98162ead76aa0ffca7c5af48dd573ce403fac"},
      {"hd512.yaml", "38fe8e57c1125cbcb4d22d955209731e8cff0959e9fd9d2013f4286182e7467d"},
      {"hd64.yaml", "c275d949aa18f1641284a242f5e8b869abc59c271e8487197bb0a45bfffe93f6"},
      {"hd64_block_sparse.yaml",
       "da0aca6475810760c39159398e5d0a157dae65fa8b22194dbc5b4ba10082b417"},
      {"hd64_causal.yaml", "e213a29b41e953630855c0999d89d33d9765cf9051960f82416e6caf370170a7"},
      {"hd64_local.yaml", "4f824f54fba1f9ac337c09b4892e2803c5f0b6e16e7859494959a1ca6be94717"},
      {"hd72.yaml", "80283a0464efe8dcfe0f7c9d3cb71711defdb5fda785018db0ff50d55f897d84"},
      {"hd72_causal_fp16.yaml", "75e7860c05d937d1b5bd6181cc10e698462d891b6f72b6139e622f71586bbd7c"},
      {"hd8.yaml", "26d991b98df6e0a195090c2090a31d5aec1669bd50db745924aef69f8996c335"},
      {"hd80.yaml", "e2d404df3bb8fdefa1462e402e975bc6069f0ea99ae439c507dbb834116a9afd"},
      {"hd96.yaml", "b14c015c9c63e261566e1985b22a1c1cca42b9bc85845e3837acbd0b60372dc2"},
      {"hd96_strided.yaml", "a9996be01c86c49b8fb5ca64fe1500030d2abda48d78441be6d9d195edd6d4e3"},
      {"qk128_v64.yaml", "d14937f9b417c232f0c81c4a9699277545e5b9ba6935a61467d73d3530d84160"},
      {"qk192_v128.yaml", "350487eba5903a1f176f5a12906ce31143e36defcc1f8ec42369756ec0f4d285"},
      {"qk192_v128_causal_fp16.yaml",
       "1fb2d3ba2a3fefa3fb8c5a37f32ec714fc54b16570f0e965d2408203a8a788ce"},
      {"qk64_v256.yaml", "66f409ca26e877b65504d3b9a73a7ec450847df67b6d71cffdee674c441ed63e"},
  };
  for (const auto& [file, hash] : kPinned) {
    INFO(file);
    CHECK(flashjit::tune::spec_hash(Spec::from_file(kConfigs + "/" + file)) == hash);
  }
  size_t shipped = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigs))
    shipped += entry.path().extension() == ".yaml";
  CHECK(shipped == std::size(kPinned));  // a new config gets its pinned hash here

  // The members no shipped config sets: arch and warp_specialization, a window with causal.
  Spec a;
  a.head_dim_qk = a.head_dim_v = 128;
  a.arch = Arch::Sm90a;
  a.warp_specialization = false;
  CHECK(flashjit::tune::spec_hash(a) ==
        "b84404499a782b567060613766a6b658e51cd19c84336f02e15f320914c6c506");
  Spec b;
  b.head_dim_qk = 64;
  b.head_dim_v = 32;
  b.dtype = DType::F16;
  b.arch = Arch::Sm80;
  b.causal = true;
  b.mask = MaskKind::SlidingWindow;
  b.window_left = 7;
  CHECK(flashjit::tune::spec_hash(b) ==
        "ad988a83bb42040006d81fabadbd41aaa777dd672f5f3ab4f25108160b8c20d9");
}

TEST_CASE("spec fields: the table's shape") {
  for (const gen::SpecField& row : gen::spec_fields()) {
    INFO(row.path);
    // Maps come before the rows under them, and every parent is a map.
    if (!row.parent().empty()) {
      const gen::SpecField* parent = gen::find_spec_field(row.parent());
      REQUIRE(parent != nullptr);
      CHECK(parent->node != gen::Node::Value);
      CHECK(parent < &row);
    }
    if (row.node == gen::Node::Value) CHECK((row.members.empty() != row.alias_of.empty()));
    if (row.selects) CHECK(gen::find_spec_field(row.parent())->node == gen::Node::OneOf);
    // A row that depends on its map's selector has one to depend on.
    if (row.applies) {
      const auto siblings = gen::spec_fields_under(row.parent());
      CHECK(std::any_of(siblings.begin(), siblings.end(),
                        [](const gen::SpecField* s) { return s->selector; }));
    }
  }
  CHECK(gen::find_spec_field("mask.pattern.kind")->selector);
  CHECK(gen::find_spec_field("nothing") == nullptr);
  CHECK(gen::spec_fields_under("hopper").size() == 1);
}

TEST_CASE("spec fields: integer rows carry their bounds, and their allowed text says them") {
  for (const gen::SpecField& row : gen::spec_fields()) {
    if (row.members.empty() || gen::value_of(Spec{}, row.members[0]).index() != 1) continue;
    INFO(row.path);
    if (row.path == "tiles.warps") {  // a set of counts, not a range
      CHECK(!row.range);
      continue;
    }
    REQUIRE(row.range);
    const std::string bounds = fmt::format("{}..{}", row.range->min, row.range->max);
    CHECK(row.allowed.find(bounds) != std::string_view::npos);
    // Validation applies the bounds: one past each end is refused under the row's name.
    if (row.path.starts_with("tiles.") || row.path.starts_with("head_dim")) {
      Spec spec = Spec::from_yaml("head_dim: 64\ntiles: {block_m: 64, block_n: 64, warps: 4, "
                                  "stages: 2}\n");
      const std::string field = std::string(row.path) + ": ";
      gen::assign(spec, row.members[0], row.range->max + row.range->step);
      CHECK_THROWS_WITH_AS(spec.validate(), doctest::Contains(field.c_str()), flashjit::Error);
      gen::assign(spec, row.members[0], row.range->min - 1);
      CHECK_THROWS_WITH_AS(spec.validate(), doctest::Contains(field.c_str()), flashjit::Error);
    }
  }
}

TEST_CASE("spec fields: the kernel's constants come from the spec") {
  const Spec spec = Spec::from_yaml(kSamples[2]);
  const std::string head = gen::spec_constants(spec, gen::ConstantGroup::HeadDims);
  CHECK(head ==
        "  static constexpr int kHeadDimQk = 64;\n  static constexpr int kHeadDimV = 64;\n");
  const std::string mask = gen::spec_constants(spec, gen::ConstantGroup::Mask);
  CHECK(mask.find("  static constexpr fj::Pattern kPattern = fj::Pattern::kLocal;\n") !=
        std::string::npos);
  CHECK(mask.find("  static constexpr int kMaskBlockQ = 64;\n") != std::string::npos);
  CHECK(mask.find("  static constexpr int kPatternWindow = 3;\n") != std::string::npos);
  CHECK(mask.find("  static constexpr bool kWindow = false;\n") != std::string::npos);
}

TEST_CASE("spec fields: check's printout is the one it had before the table") {
  // Printed by main at 3a6d8d4 for the same specs, with the backward's map added since:
  // nested maps stay in flow style, in the table's order, with only the rows of the chosen
  // pattern kind.
  CHECK(Spec::from_yaml("head_dim_qk: 64\nhead_dim_v: 32\nmask: {pattern: {kind: global_local, "
                        "global_blocks: 2, window_blocks: 1, block: 256}}\n")
            .to_yaml() ==
        "name: qk64_v32_bf16_global2local1b256\nhead_dim_qk: 64\nhead_dim_v: 32\ndtype: bf16\n"
        "causal: false\nmask: {pattern: {kind: global_local, block: 256, global_blocks: 2, "
        "window_blocks: 1}}\narch: auto\nhopper: {warp_specialization: true}\n"
        "backward: {deterministic: false}\ndecode: auto\ntiles: auto\n");
  CHECK(Spec::from_yaml("head_dim: 64\nmask: {pattern: {kind: strided, stride: 3}}\n"
                        "causal: true\narch: sm80\n")
            .to_yaml() ==
        "name: qk64_v64_bf16_causal_strided3b128\nhead_dim_qk: 64\nhead_dim_v: 64\n"
        "dtype: bf16\ncausal: true\nmask: {pattern: {kind: strided, block: 128, stride: 3}}\n"
        "arch: sm80\nhopper: {warp_specialization: true}\nbackward: {deterministic: false}\n"
        "decode: auto\ntiles: auto\n");
  CHECK(Spec::from_yaml("head_dim: 64\narch: sm90a\nhopper: {warp_specialization: false}\n"
                        "tiles: {block_m: 128, block_n: 128, warps: 12, stages: 2}\n")
            .to_yaml() ==
        "name: qk64_v64_bf16\nhead_dim_qk: 64\nhead_dim_v: 64\ndtype: bf16\ncausal: false\n"
        "mask: none\narch: sm90a\nhopper: {warp_specialization: false}\n"
        "backward: {deterministic: false}\ndecode: auto\n"
        "tiles: {block_m: 128, block_n: 128, warps: 12, stages: 2}\n");
}
