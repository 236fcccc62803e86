// Kernel bundles: many compiled kernels (artifacts, runtime/artifact.h) in one checksummed
// file, written by `flashjit build` and registered by applications (usually through the static
// registrar that the CMake function flashjit_add_kernels compiles into them). The runtime looks in
// registered bundles before the disk cache and NVRTC.
//
// A bundled kernel is matched by plan identity, which needs no NVRTC: the same target, the
// same kernel name (it encodes head dims, dtype, causal, tiles and alignment) and the same
// SHA-256 of the rendered source (which catches every other spec field and any change to the
// templates). The generator version is checked once, when the bundle is registered.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashjit/flashjit.h"

#include "runtime/artifact.h"
#include "runtime/sha256.h"

namespace flashjit::rt {

// Parses and checks file bytes (runtime/artifact.h: magic, checksum, format version, every
// field of every kernel). `name` (a path, or the embedding target) names the bundle in
// messages. Throws Error(Io) for a corrupt or truncated bundle and Error(Usage) for one of
// another format version.
Bundle read_bundle(const std::string& bytes, const std::string& name);
// The manifest as JSON: everything but the cubins (their sizes instead) and the ptxas logs.
nlohmann::json bundle_manifest(const Bundle& bundle);

// The bundles registered in this process (thread-safe). Registration refuses a bundle built by
// another generator version; every refusal is remembered so that a later miss can say why.
class BundleRegistry {
 public:
  static BundleRegistry& global();

  // Throws Error(Io/Usage) for a corrupt bundle or one of another format/generator version.
  void add(const std::string& bytes, const std::string& name);
  bool empty() const;

  struct Match {
    std::shared_ptr<const Artifact> kernel;  // null on a miss
    std::string bundle_name;
    std::string why_not;  // on a miss: what the registered bundles hold instead, and refusals
  };
  // The bundled kernel for a plan (target, kernel name) whose rendered source hashes to
  // `source_sha256`; a kernel of the same name built from another source is refused.
  Match find(const std::string& target, const std::string& kernel_name,
             const std::string& spec_name, const std::string& source_sha256) const;

 private:
  struct Registered {
    std::string name;
    std::shared_ptr<const Bundle> bundle;
  };
  mutable std::mutex mutex_;
  std::vector<Registered> bundles_;
  std::vector<std::string> refusals_;
};

}  // namespace flashjit::rt
