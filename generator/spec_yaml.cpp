// Spec <-> YAML: parsing, where every error names file:line:column, the field and what is
// allowed; and the resolved printout that parses back to the same spec.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "flashjit/flashjit.h"
#include "generator/spec_fields.h"
#include "generator/spec_rules.h"
#include "generator/spec_source.h"

namespace flashjit {
namespace {

using gen::allowed_values;
using gen::Node;
using gen::SpecField;

// Enum values, spelled through to_string() so the parser and the printout share one table.
constexpr DType kDTypes[] = {DType::F16, DType::BF16};
constexpr Arch kArchs[] = {Arch::Auto, Arch::Sm80, Arch::Sm90a};
constexpr DecodeMode kDecodeModes[] = {DecodeMode::Auto, DecodeMode::Always, DecodeMode::Never};
constexpr PatternKind kPatternKinds[] = {PatternKind::Local, PatternKind::Strided,
                                         PatternKind::GlobalLocal};

// Values flashjit knows about but does not serve yet: refused with their own message
// instead of "unknown value".
struct Planned {
  std::string_view word;
  std::string_view why;
};
constexpr Planned kPlannedDTypes[] = {{"fp8", "fp8 is not supported yet"}};

// A value as YAML spells it (a selector's value in messages: "local").
std::string word_of(const gen::MemberValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) return v;
        else if constexpr (std::is_same_v<T, int>) return std::to_string(v);
        else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
        else return to_string(v);
      },
      value);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::vector<std::string_view> keys_of(const std::vector<const SpecField*>& rows) {
  std::vector<std::string_view> keys;
  for (const SpecField* row : rows) keys.push_back(row->key());
  return keys;
}

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

gen::FieldLocation location_of(const YAML::Mark& mark, std::string key) {
  return {std::max(mark.line, 0) + 1, std::max(mark.column, 0) + 1, std::move(key)};
}

std::string located_message(const std::string& source, const gen::FieldLocation& at,
                            std::string_view what, std::string_view allowed) {
  return fmt::format("{}:{}:{}: {}: {}; allowed: {}", source, at.line, at.column, at.key, what,
                     allowed);
}

class SpecReader {
 public:
  explicit SpecReader(std::string source) : source_(std::move(source)) {}

  // Where the user wrote each canonical Spec field and under which key: a rule broken by the
  // assembled Spec is reported at the user's line and in the user's words (head_dim sets
  // both head_dim_qk and head_dim_v).
  const std::map<std::string, gen::FieldLocation, std::less<>>& fields() const { return fields_; }

  Spec read(const YAML::Node& root) {
    const std::vector<const SpecField*> top = gen::spec_fields_under("");
    if (!root.IsMap())
      fail(root.Mark(), "spec",
           root.IsNull() ? "the document is empty"
                         : fmt::format("expected a map of fields, got {}", describe(root)),
           fmt::format("a map with the keys {}", fmt::join(keys_of(top), ", ")));
    Spec spec;
    read_map(Entry{"", "spec", root, root.Mark()}, top, spec);
    if (spec.name.empty()) spec.name = gen::default_spec_name(spec);
    if (auto p = gen::find_spec_problem(spec)) fail_at_origin(*p, root.Mark());
    return spec;
  }

 private:
  [[noreturn]] void fail(const YAML::Mark& mark, std::string_view field, std::string_view what,
                         std::string_view allowed) const {
    throw Error(ErrorKind::Spec,
                located_message(source_, location_of(mark, std::string(field)), what, allowed));
  }
  [[noreturn]] void fail(const Entry& e, std::string_view what) const {
    fail(e.mark(), e.field, what, allowed_values(e.field));
  }

  // Reports a broken rule where the user wrote the field, else at `fallback`.
  [[noreturn]] void fail_at_origin(const gen::SpecProblem& p, const YAML::Mark& fallback) const {
    auto origin = fields_.find(p.field);
    if (origin == fields_.end()) fail(fallback, p.field, p.what, p.allowed);
    throw Error(ErrorKind::Spec, located_message(source_, origin->second, p.what, p.allowed));
  }

  void note(std::string_view canonical, const Entry& e) {
    fields_[std::string(canonical)] = location_of(e.mark(), e.field);
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

  // The map that is the value of `owner` (an entry, or the whole document) and holds the rows
  // `rows`: its selector first, then the other keys in the user's order, then what is missing.
  void read_map(const Entry& owner, const std::vector<const SpecField*>& rows, Spec& spec) {
    const std::string prefix = owner.key.empty() ? "" : owner.field + ".";
    const std::vector<Entry> items = entries(owner.value, prefix, keys_of(rows));
    const auto row_of = [&](const Entry& item) {
      return *std::find_if(rows.begin(), rows.end(),
                           [&](const SpecField* r) { return r->key() == item.key; });
    };
    for (const SpecField* row : rows)
      if (row->default_value)
        for (const gen::Member& m : row->members) gen::assign(spec, m, *row->default_value);
    const SpecField* selector = nullptr;
    for (const SpecField* row : rows)
      if (row->selector) selector = row;
    std::string selected;  // the selector's value ("local"), for messages
    if (selector) {
      auto it = std::find_if(items.begin(), items.end(),
                             [&](const Entry& e) { return e.key == selector->key(); });
      if (it == items.end()) fail(owner, fmt::format("{} missing from the map", selector->key()));
      read_row(*selector, *it, spec);
      selected = word_of(gen::value_of(spec, selector->members[0]));
    }
    std::vector<std::string_view> applying;
    for (const SpecField* row : rows)
      if (!row->applies || row->applies(spec)) applying.push_back(row->key());
    for (const Entry& item : items) {
      const SpecField& row = *row_of(item);
      if (&row == selector) continue;
      if (row.applies && !row.applies(spec))
        fail(item.key_mark, item.field,
             fmt::format("not a key of {} {}", selector->key(), selected),
             fmt::format("{}", fmt::join(applying, ", ")));
      read_row(row, item, spec);
    }
    std::vector<std::string_view> missing;
    for (const SpecField* row : rows)
      if (row->required && (!row->applies || row->applies(spec)) &&
          std::none_of(items.begin(), items.end(),
                       [&](const Entry& e) { return e.key == row->key(); }))
        missing.push_back(row->key());
    if (!missing.empty())
      fail(owner, fmt::format("{} missing from the map{}", fmt::join(missing, ", "),
                              selector ? fmt::format(" ({} {})", selector->key(), selected) : ""));
    for (const SpecField* row : rows)
      if (!row->alias_of.empty()) check_alias(*row, items, owner.mark());
  }

  void read_row(const SpecField& row, const Entry& e, Spec& spec) {
    switch (row.node) {
      case Node::Value: return read_value(row, e, spec);
      case Node::Map: return read_submap(row, e, spec);
      case Node::OneOf: return read_one_of(row, e, spec);
    }
  }

  // A scalar stored in the row's members (an alias's: those of the rows it stands for).
  void read_value(const SpecField& row, const Entry& e, Spec& spec) {
    std::vector<gen::Member> members = row.members;
    for (std::string_view target : row.alias_of) {
      const SpecField& aliased = *gen::find_spec_field(target);
      members.insert(members.end(), aliased.members.begin(), aliased.members.end());
      note(target, e);
    }
    const gen::MemberValue value = std::visit(
        [&](auto pointer) -> gen::MemberValue { return parse_value(pointer, e); }, members[0]);
    for (const gen::Member& m : members) gen::assign(spec, m, value);
    note(row.path, e);
  }

  gen::MemberValue parse_value(std::string Spec::*, const Entry& e) const {
    std::string name = scalar(e, "a name");
    // In C++ an empty name means "derive one"; written in YAML it is a mistake.
    if (name.empty()) fail(e, "is empty");
    return name;
  }
  gen::MemberValue parse_value(int Spec::*, const Entry& e) const { return integer(e); }
  gen::MemberValue parse_value(int Tiles::*, const Entry& e) const { return integer(e); }
  gen::MemberValue parse_value(bool Spec::*, const Entry& e) const { return boolean(e); }
  gen::MemberValue parse_value(DType Spec::*, const Entry& e) const {
    return choice(e, kDTypes, kPlannedDTypes);
  }
  gen::MemberValue parse_value(Arch Spec::*, const Entry& e) const {
    return choice(e, kArchs, std::span<const Planned>());
  }
  gen::MemberValue parse_value(DecodeMode Spec::*, const Entry& e) const {
    return choice(e, kDecodeModes, std::span<const Planned>());
  }
  gen::MemberValue parse_value(PatternKind Spec::*, const Entry& e) const {
    return choice(e, kPatternKinds, std::span<const Planned>());
  }
  gen::MemberValue parse_value(MaskKind Spec::*, const Entry& e) const {
    fail(e, "is not a scalar field");  // a OneOf's member: set by the map given
  }

  // A map of the rows under `row`, or the row's word for the defaults.
  void read_submap(const SpecField& row, const Entry& e, Spec& spec) {
    if (!row.word.empty() && e.value.IsScalar() && e.value.Scalar() == row.word)
      return note(row.path, e);
    if (!e.value.IsMap())
      fail(e, row.word.empty() ? fmt::format("expected a map, got {}", describe(e.value))
                               : fmt::format("expected {} or a map, got {}", row.word,
                                             describe(e.value)));
    if (row.selects) spec.mask = *row.selects;
    note(row.path, e);
    read_map(e, gen::spec_fields_under(row.path), spec);
    if (row.check)
      if (auto p = row.check(spec)) fail_at_origin(*p, e.mark());
  }

  // The row's word, or a map with exactly one of the maps under it:
  // {sliding_window: {left: L, right: R}}, {block_sparse: {...}} or {pattern: {...}}.
  void read_one_of(const SpecField& row, const Entry& e, Spec& spec) {
    note(row.path, e);
    const std::vector<const SpecField*> choices = gen::spec_fields_under(row.path);
    const std::vector<std::string_view> keys = keys_of(choices);
    if (e.value.IsScalar()) {
      const std::string word = e.value.Scalar();
      if (word == row.word) return;
      for (const SpecField* c : choices)
        if (word == c->key()) fail(e, fmt::format("{} needs its map: {}", c->key(), c->form));
      fail(e, fmt::format("unknown value '{}'{}", word, suggestion(word, keys)));
    }
    if (!e.value.IsMap())
      fail(e, fmt::format("expected {} or a map, got {}", row.word, describe(e.value)));
    const std::vector<Entry> given = entries(e.value, e.field + ".", keys);
    if (given.size() != 1)
      fail(e.mark(), e.field, fmt::format("{} {} kinds given", given.size(), row.key()),
           fmt::format("exactly one of {}", fmt::join(keys, ", ")));
    const Entry& chosen = given.front();
    read_submap(**std::find_if(choices.begin(), choices.end(),
                               [&](const SpecField* c) { return c->key() == chosen.key; }),
                chosen, spec);
  }

  // An alias alone, or the keys it stands for together (head_dim, or head_dim_qk and
  // head_dim_v).
  void check_alias(const SpecField& alias, const std::vector<Entry>& items,
                   const YAML::Mark& map_mark) const {
    auto find = [&](std::string_view key) -> const Entry* {
      auto it = std::find_if(items.begin(), items.end(),
                             [&](const Entry& e) { return e.key == key; });
      return it == items.end() ? nullptr : &*it;
    };
    const std::string choice = fmt::format("either {}, or both {}", alias.key(),
                                           fmt::join(alias.alias_of, " and "));
    const Entry* both = find(alias.key());
    const Entry* present = nullptr;
    std::string_view absent;
    for (std::string_view target : alias.alias_of) {
      const Entry* given = find(target);
      if (given && !present) present = given;
      if (!given && absent.empty()) absent = target;
    }
    if (both && present)
      fail(present->key_mark, present->field,
           fmt::format("cannot be combined with {} (line {})", alias.key(),
                       both->key_mark.line + 1),
           choice);
    if (both || absent.empty()) return;
    if (present)
      fail(present->key_mark, absent, fmt::format("missing, {} needs it", present->key), choice);
    fail(map_mark, alias.key(), "missing", choice);
  }

  std::string scalar(const Entry& e, std::string_view expected) const {
    if (!e.value.IsScalar())
      fail(e, fmt::format("expected {}, got {}", expected, describe(e.value)));
    return e.value.Scalar();
  }

  // Decimal digits with an optional sign, as YAML 1.2 reads them: 064 is 64 (yaml-cpp would
  // read octal 52), and 0x40, 1_000 or 1e3 are refused rather than converted.
  int integer(const Entry& e) const {
    if (e.value.IsScalar() && !is_plain_scalar(e.value))
      fail(e, fmt::format("expected an integer, got the quoted string \"{}\"", e.value.Scalar()));
    if (!e.value.IsScalar()) fail(e, fmt::format("expected an integer, got {}", describe(e.value)));
    const std::string& text = e.value.Scalar();
    std::string_view digits = text;
    if (digits.starts_with('+') || digits.starts_with('-')) digits.remove_prefix(1);
    int value = 0;
    const char* begin = text.data() + (text.starts_with('+') ? 1 : 0);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), is_digit) ||
        std::from_chars(begin, text.data() + text.size(), value).ec != std::errc())
      fail(e, fmt::format("expected an integer, got {}", describe(e.value)));
    return value;
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
  std::map<std::string, gen::FieldLocation, std::less<>> fields_;
};

constexpr std::string_view kYamlAllowed = "YAML `key: value` lines (see configs/README.md)";

// YAML breaks lines at LF, CRLF and a lone CR; yaml-cpp only at LF, so a file with lone CRs
// would be one line and a comment on it would hide the rest. Every break becomes LF.
std::string with_lf_breaks(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r') {
      out += text[i];
    } else {
      out += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    }
  }
  return out;
}

// A spec is one YAML document. yaml-cpp reads the first and ignores what follows a `---` or
// `...` marker, and takes a `%` line for a directive that ends the document, so those lines
// are refused here (YAML lets them start only at column 1): a leading `---` alone is kept.
void check_one_document(const std::string& text, const std::string& source) {
  const auto fail = [&](int line, std::string_view what) {
    throw Error(ErrorKind::Spec, fmt::format("{}:{}:1: yaml: {}; allowed: one document, {}",
                                             source, line, what, kYamlAllowed));
  };
  const auto is_marker = [](std::string_view line, std::string_view marker) {
    return line.substr(0, 3) == marker &&
           (line.size() == 3 || line[3] == ' ' || line[3] == '\t');
  };
  bool content = false;  // a line other than blanks and comments seen
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.starts_with('%')) fail(number, "a directive line ('%...') is not read");
    if (is_marker(line, "---")) {
      if (content) fail(number, "a second document ('---') is not read");
      content = true;
      continue;
    }
    if (is_marker(line, "...")) fail(number, "text after a document end ('...') is not read");
    const auto first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] != '#') content = true;
  }
}

// Prints the rows under `path` as the values of a map already begun on `out`.
void print_rows(YAML::Emitter& out, const Spec& spec, std::string_view path);

void print_value(YAML::Emitter& out, const Spec& spec, const SpecField& row) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) out << gen::resolved_spec_name(spec);
        else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, bool>) out << v;
        else out << to_string(v);
      },
      gen::value_of(spec, row.members[0]));
}

void print_row(YAML::Emitter& out, const Spec& spec, const SpecField& row) {
  out << YAML::Key << std::string(row.key()) << YAML::Value;
  if (row.node == Node::Value) return print_value(out, spec, row);
  if (row.is_word && row.is_word(spec)) {
    out << std::string(row.word);
    return;
  }
  out << YAML::Flow << YAML::BeginMap;
  if (row.node == Node::OneOf) {
    for (const SpecField* choice : gen::spec_fields_under(row.path))
      if (choice->selects == spec.mask) print_row(out, spec, *choice);
  } else {
    print_rows(out, spec, row.path);
  }
  out << YAML::EndMap;
}

void print_rows(YAML::Emitter& out, const Spec& spec, std::string_view path) {
  for (const SpecField* row : gen::spec_fields_under(path))
    if (row->alias_of.empty() && (!row->applies || row->applies(spec)))
      print_row(out, spec, *row);
}

}  // namespace

namespace gen {

LocatedSpec read_located_spec(const std::string& text, const std::string& source) {
  const std::string lines = with_lf_breaks(text);
  check_one_document(lines, source);
  YAML::Node root;
  try {
    root = YAML::Load(lines);
  } catch (const YAML::ParserException& e) {
    throw Error(ErrorKind::Spec, fmt::format("{}:{}:{}: yaml: {}; allowed: {}", source,
                                             e.mark.line + 1, e.mark.column + 1, e.msg,
                                             kYamlAllowed));
  }
  SpecReader reader(source);
  Spec spec = reader.read(root);
  return {std::move(spec), source, reader.fields()};
}

LocatedSpec read_located_spec_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::Io,
                fmt::format("{}: cannot open spec file: {}", path, std::strerror(errno)));
  if (std::filesystem::is_directory(path))
    throw Error(ErrorKind::Io, fmt::format("{}: is a directory, not a spec file", path));
  std::ostringstream text;
  text << in.rdbuf();
  return read_located_spec(text.str(), path);
}

Error located_error(const LocatedSpec& spec, const SpecProblem& problem) {
  const auto at = spec.fields.find(problem.field);
  const FieldLocation where =
      at != spec.fields.end() ? at->second : FieldLocation{1, 1, problem.field};
  return Error(ErrorKind::Spec, located_message(spec.source, where, problem.what, problem.allowed));
}

}  // namespace gen

Spec Spec::from_yaml(const std::string& text, const std::string& source) {
  return gen::read_located_spec(text, source).spec;
}

Spec Spec::from_file(const std::string& path) { return gen::read_located_spec_file(path).spec; }

std::string Spec::to_yaml() const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  print_rows(out, *this, "");
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace flashjit
