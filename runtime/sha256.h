// SHA-256 through OpenSSL's libcrypto, the one hashing helper of the runtime (cache keys,
// cache-entry and bundle checksums, source identities).
#pragma once

#include <array>
#include <string>

namespace flashjit::rt {

using Sha256Digest = std::array<unsigned char, 32>;

Sha256Digest sha256(const std::string& data);
std::string to_hex(const Sha256Digest& digest);
inline std::string sha256_hex(const std::string& data) { return to_hex(sha256(data)); }

}  // namespace flashjit::rt
