// Entries are artifacts (runtime/artifact.h) named <kernel_name>-<key>.fjk.
#include "runtime/disk_cache.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "flashjit/flashjit.h"
#include "runtime/atomic_file.h"
#include "runtime/byte_fields.h"
#include "runtime/env.h"
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
  const std::string path = path_for(kernel_name, key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;  // the ordinary miss
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    Artifact artifact = decode_artifact(file);
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
  std::error_code error;
  fs::create_directories(dir_, error);
  if (error) {
    verbose("cannot create cache directory {}: {}", dir_, error.message());
    return;
  }
  // Renamed into place: readers see either no file or a complete one, and concurrent writers
  // of one key each rename a complete file (the last one wins; their contents are identical).
  try {
    write_file_atomically(path, encode_artifact(artifact), 0644, "cache entry");
  } catch (const Error& error) {
    verbose("{}", error.what());
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
