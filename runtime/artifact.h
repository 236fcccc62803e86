// The one on-disk form of a compiled kernel, shared by disk-cache entries and bundles: a flat
// frame that cannot nest, whose every field is length-checked and range-checked on read.
//
//   frame  = 8-byte magic | u32 format version | u64 body size | body | SHA-256 of body
//   artifact body ("FJKERNEL"), fields in this order, strings as u64 length + bytes:
//            cache_key, kernel_name, target, source_sha256, spec_name, spec_yaml,
//            u32 align_bytes, u32 block_m, u32 block_n, u32 warps, u32 stages,
//            cubin, ptx, ptxas_log
//   bundle body ("FJBUNDLE"): generator_version, nvrtc_version, u64 count, then `count`
//            artifact frames, each as u64 length + bytes
//
// Integers are little-endian. The fields people read (spec_name, spec_yaml, the bundle's
// versions) must be printable ASCII (spec_yaml: and line breaks), as flashjit writes them. kArtifactFormatVersion is bumped whenever any of this changes
// (tests/cpu/golden pins the bytes); it is part of every disk-cache key, so an entry of an old
// format is never looked up again, and a bundle of another version is refused.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flashjit/flashjit.h"

namespace flashjit::rt {

inline constexpr uint32_t kArtifactFormatVersion = 2;

// Read limits: a cache entry or bundle past these is refused before anything is allocated.
inline constexpr uint64_t kMaxArtifactBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMaxBundleBytes = uint64_t{4} << 30;

struct Artifact {
  std::string cache_key;      // hex SHA-256: the disk-cache key it was compiled under
  std::string kernel_name;
  std::string target;         // "sm_90a"
  std::string source_sha256;  // hex SHA-256 of the rendered source
  std::string spec_name;
  std::string spec_yaml;      // Spec::to_yaml() of the spec it was built from
  int align_bytes = 16;
  Tiles tiles;
  std::string cubin;          // an ELF image for the CUDA machine
  std::string ptx;            // empty in bundles
  std::string ptxas_log;      // the ptxas -v report, parsed again on load
  bool operator==(const Artifact&) const = default;
};

// Decoding throws Error(Io) for bytes that are not a whole, well-formed frame of the expected
// kind, and Error(Usage) for a whole frame of another format version; each message is a phrase
// ("checksum mismatch (truncated or modified)") for the caller to prefix with the file's name.
std::string encode_artifact(const Artifact& artifact);
Artifact decode_artifact(std::string_view bytes);

struct Bundle {
  std::string generator_version;  // flashjit::version() of the builder
  std::string nvrtc_version;      // NVRTC that compiled the cubins
  std::vector<Artifact> kernels;
};

std::string encode_bundle(const Bundle& bundle);
Bundle decode_bundle(std::string_view bytes);

}  // namespace flashjit::rt
