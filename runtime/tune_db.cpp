#include "runtime/tune_db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <tuple>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "generator/tile_rules.h"
#include "runtime/atomic_file.h"
#include "runtime/bounded_read.h"
#include "runtime/env.h"
#include "runtime/operation.h"
#include "runtime/tune_entry_json.h"

namespace flashjit::tune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormat = "flashjit-tune-db";
// Entry kinds (runtime/tune_entry_json.h) extend the file without a new version: a version
// changes only when a reader of the last one would misread a file of this one.
constexpr int kVersion = 1;

template <class Entry>
auto sort_key(const Entry& e) {
  return std::tie(e.spec_summary, e.spec_hash, e.bucket, e.gpu.name, e.gpu.driver_version);
}

// `entries` sorted, so that the file diffs well, appended to `list` as JSON.
template <class Entry>
void append_sorted(std::vector<Entry> entries, json& list) {
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return sort_key(a) < sort_key(b); });
  for (const Entry& e : entries) list.push_back(entry_json(e));
}

// Puts `e` in `merged`, in place of an entry of the same GPU, spec and bucket.
template <class Entry>
void merge_entry(Entry e, std::vector<Entry>& merged, const std::string& now) {
  if (e.tuned_at.empty()) e.tuned_at = now;
  const auto same = std::find_if(merged.begin(), merged.end(), [&](const Entry& m) {
    return m.gpu == e.gpu && m.spec_hash == e.spec_hash && m.bucket == e.bucket;
  });
  if (same != merged.end())
    *same = std::move(e);
  else
    merged.push_back(std::move(e));
}

std::string holds(const TuneEntry& e) { return "tiles " + gen::tiles_label(e.tiles); }
std::string holds(const BackwardEntry& e) {
  return "backward tiles " + rt::backward_tiles_label(e.tiles);
}
std::string holds(const DecodeEntry& e) {
  return e.kv_splits > 0 ? fmt::format("{} key splits", e.kv_splits)
                         : "the heuristic's key splits (none measured faster)";
}

// The entry of `entries` for this GPU, spec and bucket, the others of this spec and bucket
// counted, and the note that says so.
template <class Entry, class Bucket>
Found<Entry> find_entry(std::vector<Entry>& entries, const GpuIdentity& gpu,
                        const std::string& hash, const Bucket& bucket, const std::string& path) {
  Found<Entry> found;
  for (Entry& e : entries) {
    if (e.spec_hash != hash || e.bucket != bucket) continue;
    if (e.gpu == gpu) {
      found.entry = std::move(e);
    } else {
      ++found.ignored_other_gpu;
      found.note += fmt::format("ignored an entry made on {}; ", describe(e.gpu));
    }
  }
  found.note += found.entry ? fmt::format("{} from tune DB {} (tuned {})", holds(*found.entry),
                                          path, found.entry->tuned_at)
                            : fmt::format("no entry for this GPU in tune DB {}", path);
  return found;
}

constexpr uint64_t kMaxDbBytes = uint64_t{64} << 20;

// The whole file, or nullopt when it does not exist; Error(Io) for a folder, a FIFO, a file
// over kMaxDbBytes or one that cannot be read.
std::optional<std::string> read_file(const std::string& path) {
  return rt::read_bounded_file(path, {kMaxDbBytes, true, false}, "tune DB");
}

void warn_skipped(const ParsedDb& parsed) {
  for (const std::string& why : parsed.skipped)
    std::fprintf(stderr, "[flashjit] warning: tune DB entry skipped: %s\n", why.c_str());
}

void create_parent_folder(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code error;
  fs::create_directories(parent, error);
  if (error)
    throw Error(ErrorKind::Io, fmt::format("tune DB {}: cannot create folder {}: {}", path,
                                           parent.string(), error.message()));
}

// Holds an exclusive flock on "<db>.lock" for its lifetime. The kernel drops the lock when
// the process dies, so a killed writer never blocks the next one.
class WriterLock {
 public:
  explicit WriterLock(const std::string& db_path) {
    create_parent_folder(db_path);
    const std::string path = db_path + ".lock";
    fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw Error(ErrorKind::Io, fmt::format("tune DB lock {}: cannot open: {}", path,
                                             std::strerror(errno)));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd_);
      throw Error(ErrorKind::Io, fmt::format("tune DB lock {}: flock failed: {}", path,
                                             std::strerror(error)));
    }
  }
  ~WriterLock() { ::close(fd_); }  // closing the descriptor releases the flock
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  int fd_ = -1;
};

// Renames a DB this writer cannot keep whole out of the way (the caller holds the writers'
// lock) and says so on stderr: a silently dropped tuning file would look like a slow GPU.
// Only writers call it; readers report and leave the file as it is.
void set_aside(const std::string& path, const std::string& why) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const std::string stem = fmt::format(
      "{}.corrupt-{}", path, std::chrono::duration_cast<std::chrono::seconds>(now).count());
  std::string aside = stem;  // never over an earlier corrupt copy: it is evidence too
  for (int n = 1; fs::exists(aside); ++n) aside = fmt::format("{}-{}", stem, n);
  std::error_code error;
  fs::rename(path, aside, error);
  if (error)
    throw Error(ErrorKind::Io, fmt::format("tune DB {} is corrupt ({}) and could not be set "
                                           "aside: {}", path, why, error.message()));
  std::fprintf(stderr, "[flashjit] warning: tune DB not kept whole (%s); moved to %s\n",
               why.c_str(), aside.c_str());
}

// The writer's read, under the writers' lock: a DB that is corrupt as a whole is set aside and
// read as empty; one with bad entries is set aside too (a copy of every entry stays there)
// and its good entries are kept.
TuneDbEntries load_for_writer(const std::string& path) {
  ParsedDb parsed;
  try {
    const std::optional<std::string> text = read_file(path);
    if (!text) return {};
    parsed = parse(*text, path);
  } catch (const Error& error) {
    set_aside(path, error.what());
    return {};
  }
  warn_skipped(parsed);
  if (!parsed.skipped.empty())
    set_aside(path, fmt::format("{} bad entr{} in {} skipped", parsed.skipped.size(),
                                parsed.skipped.size() == 1 ? "y" : "ies", path));
  return std::move(parsed.entries);
}

std::string utc_now() {
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}",
                     std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now()));
}

}  // namespace

std::string default_db_path() {
  const std::string configured = rt::tune_db_path();
  return configured.empty() ? rt::cache_dir() + "/tune.json" : configured;
}

std::string serialize(const TuneDbEntries& entries) {
  json list = json::array();
  append_sorted(entries.tiles, list);
  append_sorted(entries.decode, list);
  append_sorted(entries.backward, list);
  const json doc = {{"format", kFormat}, {"version", kVersion}, {"entries", list}};
  return doc.dump(2) + "\n";
}

ParsedDb parse(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& error) {
    throw Error(ErrorKind::Cache, fmt::format("{}: {}", source, error.what()));
  }
  // Members are looked at in place, never copied: copying a json value is recursive, and a
  // forged "version" nested 100k levels deep overflowed the stack (found under ASan).
  const auto member = [&doc](const char* key) {
    const auto found = doc.find(key);
    return found == doc.end() ? nullptr : &*found;
  };
  if (!doc.is_object() || !member("format") || *member("format") != kFormat)
    throw Error(ErrorKind::Cache,
                fmt::format("{}: not a tune DB (no \"format\": \"{}\")", source, kFormat));
  const json* version = member("version");
  if (!version || *version != kVersion)
    throw Error(ErrorKind::Cache, fmt::format("{}: tune DB version {} (this flashjit reads {})",
                                              source, version ? brief(*version) : "(none)",
                                              kVersion));
  const json* list = member("entries");
  if (!list || !list->is_array())
    throw Error(ErrorKind::Cache, fmt::format("{}: \"entries\" is not a list", source));
  ParsedDb parsed;
  for (size_t i = 0; i < list->size(); ++i) {
    try {
      read_entry((*list)[i], parsed.entries);
    } catch (const std::exception& error) {  // Error or json::exception, both name the field
      parsed.skipped.push_back(fmt::format("{}: entries[{}]: {}", source, i, error.what()));
    }
  }
  return parsed;
}

TuneDb::TuneDb(std::string path) : path_(std::move(path)) {}

TuneDbEntries TuneDb::load() const {
  const std::optional<std::string> text = read_file(path_);
  if (!text) return {};
  ParsedDb parsed = parse(*text, path_);
  warn_skipped(parsed);
  return std::move(parsed.entries);
}

namespace {

// A lookup's entries: a DB that cannot be read is a warning on stderr and none, with `note`
// saying why.
std::optional<TuneDbEntries> load_for_lookup(const TuneDb& db, std::string& note) {
  try {
    return db.load();
  } catch (const Error& error) {
    std::fprintf(stderr, "[flashjit] warning: tune DB unusable (%s); the heuristic's choice is "
                 "used\n", error.what());
    note = fmt::format("tune DB {} unusable: {}", db.path(), error.what());
    return std::nullopt;
  }
}

}  // namespace

Lookup TuneDb::lookup(const GpuIdentity& gpu, const std::string& hash,
                      const ShapeBucket& bucket) const {
  Lookup unusable;
  std::optional<TuneDbEntries> entries = load_for_lookup(*this, unusable.note);
  return entries ? find_entry(entries->tiles, gpu, hash, bucket, path_) : unusable;
}

DecodeLookup TuneDb::lookup(const GpuIdentity& gpu, const std::string& hash,
                            const DecodeBucket& bucket) const {
  DecodeLookup unusable;
  std::optional<TuneDbEntries> entries = load_for_lookup(*this, unusable.note);
  return entries ? find_entry(entries->decode, gpu, hash, bucket, path_) : unusable;
}

BackwardLookup TuneDb::lookup_backward(const GpuIdentity& gpu, const std::string& hash,
                                       const ShapeBucket& bucket) const {
  BackwardLookup unusable;
  std::optional<TuneDbEntries> entries = load_for_lookup(*this, unusable.note);
  return entries ? find_entry(entries->backward, gpu, hash, bucket, path_) : unusable;
}

void TuneDb::record(const std::vector<TuneEntry>& entries) const {
  merge_into_file({entries, {}, {}});
}

void TuneDb::record(const std::vector<DecodeEntry>& entries) const {
  merge_into_file({{}, entries, {}});
}

void TuneDb::record(const std::vector<BackwardEntry>& entries) const {
  merge_into_file({{}, {}, entries});
}

void TuneDb::merge_into_file(const TuneDbEntries& entries) const {
  const WriterLock lock(path_);
  // Re-read under the lock: another process may have recorded entries since we last looked.
  TuneDbEntries merged = load_for_writer(path_);
  const std::string now = utc_now();
  for (const TuneEntry& e : entries.tiles) merge_entry(e, merged.tiles, now);
  for (const DecodeEntry& e : entries.decode) merge_entry(e, merged.decode, now);
  for (const BackwardEntry& e : entries.backward) merge_entry(e, merged.backward, now);
  create_parent_folder(path_);
  // 0644: the DB is meant to be shared and shipped.
  rt::write_file_atomically(path_, serialize(merged), 0644, "tune DB");
}

}  // namespace flashjit::tune
