// Mutated frames (runtime/artifact.h) almost never keep a matching body size and SHA-256, so
// a target decodes each input twice: as it is (the frame checks), and with the size field and
// the checksum rewritten to fit whatever body it holds (the field checks behind them).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime/sha256.h"

namespace flashjit::fuzz {

// magic (8) | u32 version | u64 body size | body | SHA-256 (32)
inline constexpr size_t kFrameHeaderBytes = 8 + 4 + 8;
inline constexpr size_t kFrameDigestBytes = 32;

// `bytes` with its body size and checksum made to match; unchanged when too short to frame.
inline std::string with_fixed_frame(std::string_view bytes) {
  std::string fixed(bytes);
  if (fixed.size() < kFrameHeaderBytes + kFrameDigestBytes) return fixed;
  const size_t body_size = fixed.size() - kFrameHeaderBytes - kFrameDigestBytes;
  const uint64_t size_field = body_size;  // little-endian on every machine we build for
  std::memcpy(fixed.data() + 12, &size_field, sizeof(size_field));
  const rt::Sha256Digest digest = rt::sha256(fixed.substr(kFrameHeaderBytes, body_size));
  std::memcpy(fixed.data() + kFrameHeaderBytes + body_size, digest.data(), digest.size());
  return fixed;
}

}  // namespace flashjit::fuzz
