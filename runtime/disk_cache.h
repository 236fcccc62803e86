// The on-disk kernel cache (DESIGN.md): one file per key holding one artifact
// (runtime/artifact.h: cubin + metadata + format version + checksum), written to a unique
// temporary file and renamed into place. Readers take
// no lock; a corrupt or unreadable entry is a miss and gets rewritten.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/artifact.h"

namespace flashjit::rt {

// Everything that changes the compiled code goes into the key.
struct CacheKeyInput {
  std::string generator_version;
  std::string source;                // the rendered CUDA source
  std::string nvrtc_version;         // "13.0"
  std::vector<std::string> options;  // compile options (sorted before hashing)
  std::string target;                // "sm_90a"
};
// Hex SHA-256 (OpenSSL libcrypto) over one canonical serialization of the input and
// kArtifactFormatVersion.
std::string cache_key(const CacheKeyInput& input);

struct CacheStats {
  std::string dir;
  bool enabled = true;
  int entries = 0;
  uint64_t bytes = 0;
};

class DiskCache {
 public:
  // Directory from FLASHJIT_CACHE_DIR, else $XDG_CACHE_HOME/flashjit, else ~/.cache/flashjit;
  // disabled when FLASHJIT_DISABLE_CACHE is set (to anything but "0" or "").
  static DiskCache from_env();
  DiskCache(std::string dir, bool enabled);

  bool enabled() const { return enabled_; }
  const std::string& dir() const { return dir_; }
  // Path of the file for a key: <dir>/<kernel_name>-<key>.fjk
  std::string path_for(const std::string& kernel_name, const std::string& key) const;

  // nullopt on a miss, a disabled cache, or an unusable entry: a corrupt one (reported through
  // FLASHJIT_VERBOSE) or one that is not a regular file of this user's, writable by nobody
  // else, under kMaxArtifactBytes (a warning on stderr). Either is replaced by the next store.
  // Throws Error(Cache) when the folder is owned by another user or writable by group or
  // others.
  std::optional<Artifact> load(const std::string& kernel_name, const std::string& key) const;
  // Stores under the artifact's own kernel name and cache key, atomically
  // (runtime/atomic_file.h), creating the folder 0700. Failures to write are reported through
  // FLASHJIT_VERBOSE and otherwise ignored (the cache is an optimisation).
  void store(const Artifact& artifact) const;

  CacheStats stats() const;
  int clear() const;  // removes flashjit cache files, returns how many

 private:
  std::string dir_;
  bool enabled_;
};

}  // namespace flashjit::rt
