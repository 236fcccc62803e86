// Entries are artifacts (runtime/artifact.h) named <kernel_name>-<key>.fjk.
#include "runtime/disk_cache.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "flashjit/flashjit.h"
#include "runtime/atomic_file.h"
#include "runtime/bounded_read.h"
#include "runtime/byte_fields.h"
#include "runtime/env.h"
#include "runtime/private_folder.h"
#include "runtime/sha256.h"

namespace flashjit::rt {
namespace fs = std::filesystem;
namespace {

constexpr const char* kExtension = ".fjk";

bool is_entry(const fs::path& path) { return path.extension() == kExtension; }
bool is_temp(const fs::path& path) {
  return path.filename().string().find(std::string(kExtension) + std::string(kTempSuffix)) !=
         std::string::npos;
}

}  // namespace

std::string cache_key(const CacheKeyInput& input) {
  // Every field is tagged and length-prefixed, so no two different inputs serialize alike.
  std::vector<std::string> options = input.options;
  std::sort(options.begin(), options.end());
  ByteWriter canonical;
  canonical.field("flashjit-cache-key");
  canonical.u32(kArtifactFormatVersion);
  canonical.field(input.generator_version);
  canonical.field(input.source);
  canonical.field(input.nvrtc_version);
  canonical.u64(options.size());
  for (const std::string& option : options) canonical.field(option);
  canonical.field(input.target);
  return sha256_hex(canonical.bytes());
}

DiskCache DiskCache::from_env() { return DiskCache(cache_dir(), !cache_disabled()); }

DiskCache::DiskCache(std::string dir, bool enabled) : dir_(std::move(dir)), enabled_(enabled) {}

std::string DiskCache::path_for(const std::string& kernel_name, const std::string& key) const {
  return (fs::path(dir_) / (kernel_name + "-" + key + kExtension)).string();
}

std::optional<Artifact> DiskCache::load(const std::string& kernel_name,
                                        const std::string& key) const {
  if (!enabled_) return std::nullopt;
  if (!fs::exists(dir_)) return std::nullopt;  // nothing cached yet
  check_private_folder(dir_);
  const std::string path = path_for(kernel_name, key);
  std::optional<std::string> file;
  try {
    // O_NOFOLLOW and the ownership rules: what is loaded here runs on the GPU.
    file = read_bounded_file(path, {kMaxArtifactBytes, false, true}, "cache entry");
  } catch (const Error& error) {
    // Not a torn write but something planted or left there: say so even without VERBOSE.
    std::fprintf(stderr, "[flashjit] warning: %s; not loaded, it will be replaced\n",
                 error.what());
    return std::nullopt;
  }
  if (!file) return std::nullopt;  // the ordinary miss
  try {
    Artifact artifact = decode_artifact(*file);
    if (artifact.cache_key != key || artifact.kernel_name != kernel_name)
      throw Error(ErrorKind::Io, "holds another kernel or key");
    return artifact;
  } catch (const Error& error) {
    verbose("cache entry {} is unusable ({}): treated as a miss", path, error.what());
    return std::nullopt;
  }
}

void DiskCache::store(const Artifact& artifact) const {
  if (!enabled_) return;
  const std::string path = path_for(artifact.kernel_name, artifact.cache_key);
  try {
    create_private_folder(dir_);
    check_private_folder(dir_);
    // Whatever load refused at this name (a folder, a FIFO, a link) goes, so that the entry
    // is rewritten instead of being a miss forever; the folder is ours alone (checked above).
    if (fs::exists(fs::symlink_status(path)) && !fs::is_regular_file(fs::symlink_status(path)))
      fs::remove_all(path);
    // Renamed into place: readers see either no file or a complete one, and concurrent
    // writers of one key each rename a complete file (the last one wins; their contents are
    // identical).
    write_file_atomically(path, encode_artifact(artifact), 0600, "cache entry");
  } catch (const std::exception& error) {
    verbose("cache entry {} not stored: {}", path, error.what());
  }
}

CacheStats DiskCache::stats() const {
  CacheStats stats;
  stats.dir = dir_;
  stats.enabled = enabled_;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(dir_, error)) {
    if (!item.is_regular_file(error) || !is_entry(item.path())) continue;
    ++stats.entries;
    stats.bytes += item.file_size(error);
  }
  return stats;
}

int DiskCache::clear() const {
  // Also removes temp files left by killed writers; only entries are counted.
  std::vector<fs::path> doomed;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(dir_, error)) {
    if (item.is_regular_file(error) && (is_entry(item.path()) || is_temp(item.path()))) {
      doomed.push_back(item.path());
    }
  }
  int removed = 0;
  for (const fs::path& path : doomed) {
    if (fs::remove(path, error) && is_entry(path)) ++removed;
  }
  return removed;
}

}  // namespace flashjit::rt
