// Entry file layout (all integers little-endian; the format version is bumped whenever it
// changes, and it is part of every key, so an old file is simply never looked up again):
//
//   "FJKCACHE"                       8-byte magic
//   u32 format version               kFormatVersion
//   u64 payload size
//   payload = six fields, each u64 length + bytes:
//             key, kernel_name, target, cubin, ptx, ptxas_log
//   32 bytes SHA-256 of the payload
//
// A plain length-prefixed layout rather than JSON: cubins are binary and the reader has to
// reject a truncated file before trusting any length it reads.
#include "runtime/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "flashjit/flashjit.h"
#include "runtime/atomic_file.h"
#include "runtime/env.h"
#include "runtime/sha256.h"

namespace flashjit::rt {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'F', 'J', 'K', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kFormatVersion = 1;
constexpr const char* kExtension = ".fjk";
constexpr size_t kDigestBytes = sizeof(Sha256Digest);

void put_u32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}
void put_field(std::string& out, const std::string& field) {
  put_u64(out, field.size());
  out += field;
}

// Reads fields back from a byte string, refusing to run past its end.
class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  bool u32(uint32_t& value) { return integer(value, 4); }
  bool u64(uint64_t& value) { return integer(value, 8); }
  bool bytes(std::string& out, uint64_t size) {
    if (size > data_.size() - pos_) return false;
    out.assign(data_, pos_, size);
    pos_ += size;
    return true;
  }
  bool field(std::string& out) {
    uint64_t size = 0;
    return u64(size) && bytes(out, size);
  }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  template <typename T>
  bool integer(T& value, int size) {
    if (data_.size() - pos_ < static_cast<size_t>(size)) return false;
    value = 0;
    for (int i = 0; i < size; ++i) {
      value |= static_cast<T>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    }
    pos_ += size;
    return true;
  }
  const std::string& data_;
  size_t pos_ = 0;
};

bool is_entry(const fs::path& path) { return path.extension() == kExtension; }
bool is_temp(const fs::path& path) {
  return path.filename().string().find(std::string(kExtension) + std::string(kTempSuffix)) !=
         std::string::npos;
}

std::string serialize(const std::string& key, const CacheEntry& entry) {
  std::string payload;
  for (const std::string* field :
       {&key, &entry.kernel_name, &entry.target, &entry.cubin, &entry.ptx, &entry.ptxas_log}) {
    put_field(payload, *field);
  }
  std::string file(kMagic, sizeof(kMagic));
  put_u32(file, kFormatVersion);
  put_u64(file, payload.size());
  file += payload;
  const Sha256Digest digest = sha256(payload);
  file.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  return file;
}

// Why `file` is not a valid entry for `key` ("" when it is).
std::string parse(const std::string& file, const std::string& key, CacheEntry& entry) {
  Reader reader(file);
  std::string magic;
  uint32_t version = 0;
  uint64_t payload_size = 0;
  if (!reader.bytes(magic, sizeof(kMagic)) || magic != std::string(kMagic, sizeof(kMagic))) {
    return "bad magic";
  }
  if (!reader.u32(version) || version != kFormatVersion) {
    return fmt::format("format version {} (expected {})", version, kFormatVersion);
  }
  std::string payload, checksum;
  if (!reader.u64(payload_size) || !reader.bytes(payload, payload_size) ||
      !reader.bytes(checksum, kDigestBytes) || !reader.at_end()) {
    return "truncated or oversized";
  }
  const Sha256Digest digest = sha256(payload);
  if (checksum != std::string(reinterpret_cast<const char*>(digest.data()), digest.size())) {
    return "checksum mismatch";
  }
  Reader fields(payload);
  std::string stored_key;
  if (!fields.field(stored_key) || !fields.field(entry.kernel_name) ||
      !fields.field(entry.target) || !fields.field(entry.cubin) || !fields.field(entry.ptx) ||
      !fields.field(entry.ptxas_log) || !fields.at_end()) {
    return "malformed payload";
  }
  if (stored_key != key) return "holds another key";
  return "";
}

}  // namespace

std::string cache_key(const CacheKeyInput& input) {
  // Every field is tagged and length-prefixed, so no two different inputs serialize alike.
  std::vector<std::string> options = input.options;
  std::sort(options.begin(), options.end());
  std::string canonical;
  put_field(canonical, "flashjit-cache-key");
  put_u32(canonical, kFormatVersion);
  put_field(canonical, input.generator_version);
  put_field(canonical, input.source);
  put_field(canonical, input.nvrtc_version);
  put_u64(canonical, options.size());
  for (const std::string& option : options) put_field(canonical, option);
  put_field(canonical, input.target);
  return sha256_hex(canonical);
}

DiskCache DiskCache::from_env() { return DiskCache(cache_dir(), !cache_disabled()); }

DiskCache::DiskCache(std::string dir, bool enabled) : dir_(std::move(dir)), enabled_(enabled) {}

std::string DiskCache::path_for(const std::string& kernel_name, const std::string& key) const {
  return (fs::path(dir_) / (kernel_name + "-" + key + kExtension)).string();
}

std::optional<CacheEntry> DiskCache::load(const std::string& kernel_name,
                                          const std::string& key) const {
  if (!enabled_) return std::nullopt;
  const std::string path = path_for(kernel_name, key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;  // the ordinary miss
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CacheEntry entry;
  if (std::string why = parse(file, key, entry); !why.empty()) {
    verbose("cache entry {} is unusable ({}): treated as a miss", path, why);
    return std::nullopt;
  }
  return entry;
}

void DiskCache::store(const std::string& key, const CacheEntry& entry) const {
  if (!enabled_) return;
  const std::string path = path_for(entry.kernel_name, key);
  std::error_code error;
  fs::create_directories(dir_, error);
  if (error) {
    verbose("cannot create cache directory {}: {}", dir_, error.message());
    return;
  }
  // Renamed into place: readers see either no file or a complete one, and concurrent writers
  // of one key each rename a complete file (the last one wins; their contents are identical).
  try {
    write_file_atomically(path, serialize(key, entry), 0644, "cache entry");
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
