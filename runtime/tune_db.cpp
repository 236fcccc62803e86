#include "runtime/tune_db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
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

namespace flashjit::tune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormat = "flashjit-tune-db";
constexpr int kVersion = 1;

json tiles_json(const Tiles& t) {
  return {{"block_m", t.block_m}, {"block_n", t.block_n}, {"warps", t.warps},
          {"stages", t.stages}};
}

// The integer at `key`, which must fit an int: json's get<int>() truncates 2^40 and turns
// 3e60 into undefined behaviour (found by fuzz/fuzz_tune_db).
int int_at(const json& j, const char* key) {
  const json& value = j.at(key);
  if (value.is_number_unsigned() && value.get<uint64_t>() <= INT_MAX)
    return static_cast<int>(value.get<uint64_t>());
  if (value.is_number_integer() && !value.is_number_unsigned() &&
      value.get<int64_t>() >= INT_MIN && value.get<int64_t>() <= INT_MAX)
    return static_cast<int>(value.get<int64_t>());
  throw Error(ErrorKind::Cache, fmt::format("\"{}\" is not an integer that fits an int", key));
}

// A value for a message: scalars as written (cut), lists and objects by kind only, since
// dumping them is recursive and a forged file may nest them a million levels deep.
std::string brief(const json& value) {
  if (value.is_structured()) return value.is_array() ? "(a list)" : "(an object)";
  const std::string text = value.dump();
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

Tiles tiles_from(const json& j) {
  Tiles t{int_at(j, "block_m"), int_at(j, "block_n"), int_at(j, "warps"), int_at(j, "stages")};
  if (t.block_m < 1 || t.block_n < 1 || t.warps < 1 || t.stages < 1)
    throw Error(ErrorKind::Cache, fmt::format("tiles m{}n{}w{}s{} hold a value below 1",
                                              t.block_m, t.block_n, t.warps, t.stages));
  return t;
}

json entry_json(const TuneEntry& e) {
  json j = {{"gpu",
           {{"name", e.gpu.name},
            {"compute_capability", fmt::format("{}.{}", e.gpu.cc_major, e.gpu.cc_minor)},
            {"sm_count", e.gpu.sm_count},
            {"driver_version", e.gpu.driver_version},
            {"nvrtc_version", e.gpu.nvrtc_version}}},
          {"spec_hash", e.spec_hash},
          {"spec", e.spec_summary},
          {"bucket",
           {{"seqlen_q", e.bucket.seqlen_q},
            {"seqlen_k", e.bucket.seqlen_k},
            {"batch_heads", e.bucket.batch_heads}}},
          {"target", e.target},
          {"tiles", tiles_json(e.tiles)},
          {"tuned_ms", e.tuned_ms},
          {"heuristic_ms", e.heuristic_ms},
          {"tuned_at", e.tuned_at}};
  // Optional, as entry_from reads it: an entry read without heuristic tiles must not be
  // written back with zeros, which the next read refuses (found by fuzz/fuzz_tune_db).
  if (!e.heuristic_tiles.is_auto()) j["heuristic_tiles"] = tiles_json(e.heuristic_tiles);
  return j;
}

TuneEntry entry_from(const json& j) {
  TuneEntry e;
  const json& gpu = j.at("gpu");
  e.gpu.name = gpu.at("name").get<std::string>();
  const std::string cc = gpu.at("compute_capability").get<std::string>();
  if (std::sscanf(cc.c_str(), "%d.%d", &e.gpu.cc_major, &e.gpu.cc_minor) != 2)
    throw Error(ErrorKind::Cache, fmt::format("compute_capability '{}' is not MAJOR.MINOR", cc));
  e.gpu.sm_count = int_at(gpu, "sm_count");
  e.gpu.driver_version = int_at(gpu, "driver_version");
  e.gpu.nvrtc_version = gpu.at("nvrtc_version").get<std::string>();
  e.spec_hash = j.at("spec_hash").get<std::string>();
  e.spec_summary = j.value("spec", "");
  const json& bucket = j.at("bucket");
  e.bucket = {int_at(bucket, "seqlen_q"), int_at(bucket, "seqlen_k"),
              int_at(bucket, "batch_heads")};
  e.target = j.at("target").get<std::string>();
  e.tiles = tiles_from(j.at("tiles"));
  e.tuned_ms = j.value("tuned_ms", 0.0);
  if (j.contains("heuristic_tiles")) e.heuristic_tiles = tiles_from(j.at("heuristic_tiles"));
  e.heuristic_ms = j.value("heuristic_ms", 0.0);
  e.tuned_at = j.value("tuned_at", "");
  return e;
}

auto sort_key(const TuneEntry& e) {
  return std::tie(e.spec_summary, e.spec_hash, e.bucket, e.gpu.name, e.gpu.driver_version);
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
std::vector<TuneEntry> load_for_writer(const std::string& path) {
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

bool same_key(const TuneEntry& a, const TuneEntry& b) {
  return a.gpu == b.gpu && a.spec_hash == b.spec_hash && a.bucket == b.bucket;
}

std::string default_db_path() {
  const std::string configured = rt::tune_db_path();
  return configured.empty() ? rt::cache_dir() + "/tune.json" : configured;
}

std::string serialize(const std::vector<TuneEntry>& entries) {
  std::vector<TuneEntry> sorted = entries;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const TuneEntry& a, const TuneEntry& b) { return sort_key(a) < sort_key(b); });
  json list = json::array();
  for (const TuneEntry& e : sorted) list.push_back(entry_json(e));
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
      parsed.entries.push_back(entry_from((*list)[i]));
    } catch (const std::exception& error) {  // Error or json::exception, both name the field
      parsed.skipped.push_back(fmt::format("{}: entries[{}]: {}", source, i, error.what()));
    }
  }
  return parsed;
}

TuneDb::TuneDb(std::string path) : path_(std::move(path)) {}

std::vector<TuneEntry> TuneDb::load() const {
  const std::optional<std::string> text = read_file(path_);
  if (!text) return {};
  ParsedDb parsed = parse(*text, path_);
  warn_skipped(parsed);
  return std::move(parsed.entries);
}

Lookup TuneDb::lookup(const GpuIdentity& gpu, const std::string& hash,
                      const ShapeBucket& bucket) const {
  Lookup found;
  std::vector<TuneEntry> entries;
  try {
    entries = load();
  } catch (const Error& error) {
    // A caller that only wanted tiles gets the heuristic's, and the reason on stderr.
    std::fprintf(stderr, "[flashjit] warning: tune DB unusable (%s); the heuristic's tiles are "
                 "used\n", error.what());
    found.note = fmt::format("tune DB {} unusable: {}", path_, error.what());
    return found;
  }
  for (TuneEntry& e : entries) {
    if (e.spec_hash != hash || e.bucket != bucket) continue;
    if (e.gpu == gpu) {
      found.entry = std::move(e);
    } else {
      ++found.ignored_other_gpu;
      found.note += fmt::format("ignored an entry made on {}; ", describe(e.gpu));
    }
  }
  found.note += found.entry ? fmt::format("tiles {} from tune DB {} (tuned {})",
                                          gen::tiles_label(found.entry->tiles), path_,
                                          found.entry->tuned_at)
                            : fmt::format("no entry for this GPU in tune DB {}", path_);
  return found;
}

void TuneDb::record(const std::vector<TuneEntry>& entries) const {
  const WriterLock lock(path_);
  // Re-read under the lock: another process may have recorded entries since we last looked.
  std::vector<TuneEntry> merged = load_for_writer(path_);
  for (TuneEntry e : entries) {
    if (e.tuned_at.empty()) e.tuned_at = utc_now();
    const auto same = std::find_if(merged.begin(), merged.end(),
                                   [&](const TuneEntry& m) { return same_key(m, e); });
    if (same != merged.end())
      *same = std::move(e);
    else
      merged.push_back(std::move(e));
  }
  create_parent_folder(path_);
  // 0644: the DB is meant to be shared and shipped.
  rt::write_file_atomically(path_, serialize(merged), 0644, "tune DB");
}

}  // namespace flashjit::tune
