// Spec <-> YAML: parsing, where every error names file:line:column, the field and what is
// allowed; and the resolved printout that parses back to the same spec.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string_view>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/spec_rules.h"

namespace flashjit {
namespace {

using gen::allowed_values;

constexpr std::string_view kTopKeys[] = {"name",   "head_dim", "head_dim_qk", "head_dim_v",
                                         "dtype",  "causal",   "mask",        "arch",
                                         "hopper", "tiles"};
constexpr std::string_view kHopperKeys[] = {"warp_specialization"};
constexpr std::string_view kTileKeys[] = {"block_m", "block_n", "warps", "stages"};

constexpr std::string_view kHeadDimChoice = "either head_dim, or both head_dim_qk and head_dim_v";

// Enum values, spelled through to_string() so the parser and the printout share one table.
constexpr DType kDTypes[] = {DType::F16, DType::BF16};
constexpr Arch kArchs[] = {Arch::Auto, Arch::Sm80, Arch::Sm90a};

constexpr std::string_view kMaskKinds[] = {"sliding_window", "block_sparse", "pattern"};
constexpr std::string_view kWindowKeys[] = {"left", "right"};
constexpr std::string_view kBlockSparseKeys[] = {"block_q", "block_k"};
constexpr std::string_view kPatternKeys[] = {"kind",   "block",         "blocks",
                                             "stride", "global_blocks", "window_blocks"};
constexpr PatternKind kPatternKinds[] = {PatternKind::Local, PatternKind::Strided,
                                         PatternKind::GlobalLocal};
constexpr int kDefaultPatternBlock = 128;  // FlexAttention's default block size

// The keys each pattern kind requires besides kind (and the optional block).
struct PatternParams {
  PatternKind kind;
  std::vector<std::string_view> keys;
};
const PatternParams kPatternParams[] = {
    {PatternKind::Local, {"blocks"}},
    {PatternKind::Strided, {"stride"}},
    {PatternKind::GlobalLocal, {"global_blocks", "window_blocks"}},
};

// What each mask kind's map looks like, for messages.
constexpr std::string_view kMaskForms[] = {
    "sliding_window needs its map: {left: L, right: R}",
    "block_sparse needs its map: {block_q: BQ, block_k: BK}",
    "pattern needs its map: {kind: local|strided|global_local, block: B, ...}",
};

// Values flashjit knows about but does not serve yet: refused with their own message
// instead of "unknown value".
struct Planned {
  std::string_view word;
  std::string_view why;
};
constexpr Planned kPlannedDTypes[] = {{"fp8", "fp8 is not supported yet"}};

// Levenshtein distance; the word lists are a handful of short keys.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean 'causal'?)" when `word` is a plausible typo of one of `options`.
template <class Words>
std::string suggestion(std::string_view word, const Words& options) {
  constexpr size_t kMaxTypo = 2;
  std::string_view best;
  size_t best_distance = kMaxTypo + 1;
  for (std::string_view option : options) {
    size_t d = edit_distance(word, option);
    if (d < best_distance && d < word.size()) {
      best = option;
      best_distance = d;
    }
  }
  return best.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", best);
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "no value";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Map: return "a map";
    default: return fmt::format("'{}'", node.Scalar());
  }
}

// A scalar typed without quotes; a quoted "100" is a string in YAML, not a number.
bool is_plain_scalar(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "?"; }

// One `key: value` of a map, with the dotted field name used in messages.
struct Entry {
  std::string key;
  std::string field;  // "causal", "tiles.block_m"
  YAML::Node value;
  YAML::Mark key_mark;
  // A missing value ("causal:" and nothing) is marked at the next token; point at the key.
  YAML::Mark mark() const { return value.IsNull() ? key_mark : value.Mark(); }
};

// Where the user wrote a canonical Spec field and under which key: a rule broken by the
// assembled Spec is reported at the user's line and in the user's words (head_dim sets
// both head_dim_qk and head_dim_v).
struct Origin {
  YAML::Mark mark;
  std::string key;
};

class SpecReader {
 public:
  explicit SpecReader(std::string source) : source_(std::move(source)) {}

  Spec read(const YAML::Node& root) {
    if (!root.IsMap())
      fail(root.Mark(), "spec",
           root.IsNull() ? "the document is empty"
                         : fmt::format("expected a map of fields, got {}", describe(root)),
           fmt::format("a map with the keys {}", fmt::join(kTopKeys, ", ")));
    Spec spec;
    std::map<std::string, Entry, std::less<>> given;
    for (Entry& e : entries(root, "", kTopKeys)) {
      read_field(e, spec);
      given.emplace(e.key, std::move(e));
    }
    check_head_dims(root, given);
    if (spec.name.empty()) spec.name = gen::default_spec_name(spec);
    if (auto p = gen::find_spec_problem(spec)) fail_at_origin(*p, root.Mark());
    return spec;
  }

 private:
  [[noreturn]] void fail(const YAML::Mark& mark, std::string_view field, std::string_view what,
                         std::string_view allowed) const {
    throw Error(ErrorKind::Spec,
                fmt::format("{}:{}:{}: {}: {}; allowed: {}", source_, std::max(mark.line, 0) + 1,
                            std::max(mark.column, 0) + 1, field, what, allowed));
  }
  [[noreturn]] void fail(const Entry& e, std::string_view what) const {
    fail(e.mark(), e.field, what, allowed_values(e.field));
  }

  // Reports a broken rule where the user wrote the field, else at `fallback`.
  [[noreturn]] void fail_at_origin(const gen::SpecProblem& p, const YAML::Mark& fallback) const {
    auto origin = origins_.find(p.field);
    if (origin == origins_.end()) fail(fallback, p.field, p.what, p.allowed);
    fail(origin->second.mark, origin->second.key, p.what, p.allowed);
  }

  void note(std::string_view canonical, const Entry& e) {
    origins_[std::string(canonical)] = Origin{e.mark(), e.field};
  }

  // The entries of a YAML map; keys must be known words, each given once.
  template <class Keys>
  std::vector<Entry> entries(const YAML::Node& map, std::string_view prefix, const Keys& keys) {
    std::vector<Entry> out;
    std::string map_field =
        prefix.empty() ? "spec" : std::string(prefix.substr(0, prefix.size() - 1));
    for (const auto& item : map) {
      if (!item.first.IsScalar())
        fail(item.first.Mark(), map_field, fmt::format("a key is {}", describe(item.first)),
             fmt::format("the keys {}", fmt::join(keys, ", ")));
      std::string key = item.first.Scalar();
      std::string field = fmt::format("{}{}", prefix, key);
      if (std::find(std::begin(keys), std::end(keys), key) == std::end(keys))
        fail(item.first.Mark(), field, fmt::format("unknown key{}", suggestion(key, keys)),
             fmt::format("{}", fmt::join(keys, ", ")));
      auto first =
          std::find_if(out.begin(), out.end(), [&](const Entry& e) { return e.key == key; });
      if (first != out.end())
        fail(item.first.Mark(), field,
             fmt::format("given twice (first at line {})", first->key_mark.line + 1),
             "each key at most once");
      out.push_back(Entry{key, field, item.second, item.first.Mark()});
    }
    return out;
  }

  void read_field(const Entry& e, Spec& spec) {
    if (e.key == "name") {
      spec.name = scalar(e, "a name");
      // In C++ an empty name means "derive one"; written in YAML it is a mistake.
      if (spec.name.empty()) fail(e, "is empty");
      note("name", e);
    } else if (e.key == "head_dim") {
      spec.head_dim_qk = spec.head_dim_v = integer(e);
      note("head_dim_qk", e);
      note("head_dim_v", e);
    } else if (e.key == "head_dim_qk") {
      spec.head_dim_qk = integer(e);
      note("head_dim_qk", e);
    } else if (e.key == "head_dim_v") {
      spec.head_dim_v = integer(e);
      note("head_dim_v", e);
    } else if (e.key == "dtype") {
      spec.dtype = choice(e, kDTypes, kPlannedDTypes);
    } else if (e.key == "causal") {
      spec.causal = boolean(e);
    } else if (e.key == "mask") {
      read_mask(e, spec);
    } else if (e.key == "arch") {
      spec.arch = choice(e, kArchs, std::span<const Planned>());
    } else if (e.key == "hopper") {
      read_hopper(e, spec);
    } else if (e.key == "tiles") {
      read_tiles(e, spec);
    }
  }

  // head_dim alone, or head_dim_qk and head_dim_v together.
  void check_head_dims(const YAML::Node& root,
                       const std::map<std::string, Entry, std::less<>>& given) const {
    auto find = [&](std::string_view key) -> const Entry* {
      auto it = given.find(key);
      return it == given.end() ? nullptr : &it->second;
    };
    const Entry* both = find("head_dim");
    const Entry* qk = find("head_dim_qk");
    const Entry* v = find("head_dim_v");
    if (both && (qk || v)) {
      const Entry& extra = qk ? *qk : *v;
      fail(extra.key_mark, extra.field,
           fmt::format("cannot be combined with head_dim (line {})", both->key_mark.line + 1),
           kHeadDimChoice);
    }
    if (both || (qk && v)) return;
    if (qk || v) {
      const Entry& present = qk ? *qk : *v;
      fail(present.key_mark, qk ? "head_dim_v" : "head_dim_qk",
           fmt::format("missing, {} needs it", present.key), kHeadDimChoice);
    }
    fail(root.Mark(), "head_dim", "missing", kHeadDimChoice);
  }

  // `none`, or a map with one mask kind: {sliding_window: {left: L, right: R}},
  // {block_sparse: {block_q: BQ, block_k: BK}} or {pattern: {kind: K, block: B, ...}}.
  void read_mask(const Entry& e, Spec& spec) {
    if (e.value.IsScalar()) {
      const std::string word = e.value.Scalar();
      if (word == "none") return;
      for (size_t n = 0; n < std::size(kMaskKinds); ++n)
        if (word == kMaskKinds[n]) fail(e, kMaskForms[n]);
      fail(e, fmt::format("unknown value '{}'{}", word, suggestion(word, kMaskKinds)));
    }
    if (!e.value.IsMap()) fail(e, fmt::format("expected none or a map, got {}", describe(e.value)));
    const std::vector<Entry> kinds = entries(e.value, "mask.", kMaskKinds);
    if (kinds.size() != 1)
      fail(e.mark(), e.field, fmt::format("{} mask kinds given", kinds.size()),
           "exactly one of sliding_window, block_sparse, pattern");
    const Entry& kind = kinds.front();
    if (!kind.value.IsMap())
      fail(kind, fmt::format("expected a map, got {}", describe(kind.value)));
    if (kind.key == "sliding_window") {
      read_pair(kind, kWindowKeys, spec.window_left, spec.window_right);
      spec.mask = MaskKind::SlidingWindow;
    } else if (kind.key == "block_sparse") {
      read_pair(kind, kBlockSparseKeys, spec.block_q, spec.block_k);
      spec.mask = MaskKind::BlockSparse;
    } else {
      read_pattern(kind, spec);
    }
  }

  // A map of exactly the two integer keys `keys` (e.g. left and right).
  void read_pair(const Entry& map, const std::string_view (&keys)[2], int& first, int& second) {
    std::vector<std::string_view> missing(std::begin(keys), std::end(keys));
    for (const Entry& item : entries(map.value, map.field + ".", keys)) {
      (item.key == keys[0] ? first : second) = integer(item);
      note(item.field, item);
      std::erase(missing, item.key);
    }
    if (!missing.empty())
      fail(map, fmt::format("{} missing from the map", fmt::join(missing, ", ")));
  }

  // {kind: K, block: B, ...}: block is optional; each kind requires its own keys and no other.
  void read_pattern(const Entry& map, Spec& spec) {
    const std::vector<Entry> items = entries(map.value, "mask.pattern.", kPatternKeys);
    auto kind_entry = std::find_if(items.begin(), items.end(),
                                   [](const Entry& item) { return item.key == "kind"; });
    if (kind_entry == items.end()) fail(map, "kind missing from the map");
    spec.pattern = choice(*kind_entry, kPatternKinds, std::span<const Planned>());
    note("mask.pattern.kind", *kind_entry);
    const PatternParams& params = *std::find_if(
        std::begin(kPatternParams), std::end(kPatternParams),
        [&](const PatternParams& p) { return p.kind == spec.pattern; });
    spec.block_q = spec.block_k = kDefaultPatternBlock;
    std::vector<std::string_view> missing = params.keys;
    for (const Entry& item : items) {
      if (item.key == "kind") continue;
      if (item.key == "block") {
        spec.block_q = spec.block_k = integer(item);
      } else if (std::find(params.keys.begin(), params.keys.end(), item.key) == params.keys.end()) {
        fail(item.key_mark, item.field,
             fmt::format("not a key of kind {}", to_string(spec.pattern)),
             fmt::format("kind, block, {}", fmt::join(params.keys, ", ")));
      } else if (item.key == "stride") {
        spec.pattern_stride = integer(item);
      } else if (item.key == "global_blocks") {
        spec.pattern_global = integer(item);
      } else {  // blocks (local) or window_blocks (global_local)
        spec.pattern_window = integer(item);
      }
      note(item.field, item);
      std::erase(missing, item.key);
    }
    if (!missing.empty())
      fail(map, fmt::format("{} missing from the map (kind {})", fmt::join(missing, ", "),
                            to_string(spec.pattern)));
    spec.mask = MaskKind::Pattern;
  }

  void read_hopper(const Entry& e, Spec& spec) {
    if (!e.value.IsMap()) fail(e, fmt::format("expected a map, got {}", describe(e.value)));
    for (const Entry& item : entries(e.value, "hopper.", kHopperKeys))
      if (item.key == "warp_specialization") spec.warp_specialization = boolean(item);
  }

  void read_tiles(const Entry& e, Spec& spec) {
    if (e.value.IsScalar() && e.value.Scalar() == "auto") {
      spec.tiles = Tiles{};
      return;
    }
    if (!e.value.IsMap()) fail(e, fmt::format("expected auto or a map, got {}", describe(e.value)));
    Tiles tiles;
    std::vector<std::string_view> missing(std::begin(kTileKeys), std::end(kTileKeys));
    for (const Entry& item : entries(e.value, "tiles.", kTileKeys)) {
      int value = integer(item);
      if (item.key == "block_m") tiles.block_m = value;
      if (item.key == "block_n") tiles.block_n = value;
      if (item.key == "warps") tiles.warps = value;
      if (item.key == "stages") tiles.stages = value;
      note(item.field, item);
      std::erase(missing, item.key);
    }
    if (!missing.empty()) fail(e, fmt::format("{} missing from the map", fmt::join(missing, ", ")));
    if (auto p = gen::find_explicit_tiles_problem(tiles)) fail_at_origin(*p, e.mark());
    spec.tiles = tiles;
  }

  std::string scalar(const Entry& e, std::string_view expected) const {
    if (!e.value.IsScalar())
      fail(e, fmt::format("expected {}, got {}", expected, describe(e.value)));
    return e.value.Scalar();
  }

  int integer(const Entry& e) const {
    if (e.value.IsScalar() && !is_plain_scalar(e.value))
      fail(e, fmt::format("expected an integer, got the quoted string \"{}\"", e.value.Scalar()));
    if (!e.value.IsScalar()) fail(e, fmt::format("expected an integer, got {}", describe(e.value)));
    try {
      return e.value.as<int>();
    } catch (const YAML::BadConversion&) {
      fail(e, fmt::format("expected an integer, got {}", describe(e.value)));
    }
  }

  // YAML 1.2 booleans only: "yes", "on" and friends are YAML 1.1 surprises.
  bool boolean(const Entry& e) const {
    static constexpr std::string_view kTrue[] = {"true", "True", "TRUE"};
    static constexpr std::string_view kFalse[] = {"false", "False", "FALSE"};
    if (is_plain_scalar(e.value)) {
      const std::string& word = e.value.Scalar();
      if (std::find(std::begin(kTrue), std::end(kTrue), word) != std::end(kTrue)) return true;
      if (std::find(std::begin(kFalse), std::end(kFalse), word) != std::end(kFalse)) return false;
    }
    fail(e, fmt::format("expected true or false, got {}", describe(e.value)));
  }

  template <class E, size_t N>
  E choice(const Entry& e, const E (&values)[N], std::span<const Planned> planned) const {
    std::string word = scalar(e, "a word");
    std::vector<std::string_view> words;
    for (E value : values) {
      if (word == to_string(value)) return value;
      words.push_back(to_string(value));
    }
    for (const Planned& p : planned)
      if (word == p.word) fail(e, p.why);
    fail(e, fmt::format("unknown value '{}'{}", word, suggestion(word, words)));
  }

  std::string source_;
  std::map<std::string, Origin, std::less<>> origins_;
};

}  // namespace

Spec Spec::from_yaml(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw Error(
        ErrorKind::Spec,
        fmt::format("{}:{}:{}: yaml: {}; allowed: YAML `key: value` lines (see configs/README.md)",
                    source, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  return SpecReader(source).read(root);
}

Spec Spec::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::Io,
                fmt::format("{}: cannot open spec file: {}", path, std::strerror(errno)));
  if (std::filesystem::is_directory(path))
    throw Error(ErrorKind::Io, fmt::format("{}: is a directory, not a spec file", path));
  std::ostringstream text;
  text << in.rdbuf();
  return from_yaml(text.str(), path);
}

std::string Spec::to_yaml() const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << gen::resolved_spec_name(*this);
  out << YAML::Key << "head_dim_qk" << YAML::Value << head_dim_qk;
  out << YAML::Key << "head_dim_v" << YAML::Value << head_dim_v;
  out << YAML::Key << "dtype" << YAML::Value << to_string(dtype);
  out << YAML::Key << "causal" << YAML::Value << causal;
  out << YAML::Key << "mask" << YAML::Value;
  if (mask == MaskKind::None) {
    out << to_string(mask);
  } else {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << to_string(mask) << YAML::Value
        << YAML::BeginMap;
    const auto field = [&](const char* key, int value) {
      out << YAML::Key << key << YAML::Value << value;
    };
    if (mask == MaskKind::SlidingWindow) {
      field("left", window_left);
      field("right", window_right);
    } else if (mask == MaskKind::BlockSparse) {
      field("block_q", block_q);
      field("block_k", block_k);
    } else {
      out << YAML::Key << "kind" << YAML::Value << to_string(pattern);
      field("block", block_q);
      if (pattern == PatternKind::Local) field("blocks", pattern_window);
      if (pattern == PatternKind::Strided) field("stride", pattern_stride);
      if (pattern == PatternKind::GlobalLocal) {
        field("global_blocks", pattern_global);
        field("window_blocks", pattern_window);
      }
    }
    out << YAML::EndMap << YAML::EndMap;
  }
  out << YAML::Key << "arch" << YAML::Value << to_string(arch);
  out << YAML::Key << "hopper" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "warp_specialization" << YAML::Value << warp_specialization;
  out << YAML::EndMap;
  out << YAML::Key << "tiles" << YAML::Value;
  if (tiles.is_auto()) {
    out << "auto";
  } else {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "block_m" << YAML::Value << tiles.block_m;
    out << YAML::Key << "block_n" << YAML::Value << tiles.block_n;
    out << YAML::Key << "warps" << YAML::Value << tiles.warps;
    out << YAML::Key << "stages" << YAML::Value << tiles.stages;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace flashjit
