#include "runtime/sha256.h"

#include <openssl/evp.h>

#include "flashjit/flashjit.h"

namespace flashjit::rt {

Sha256Digest sha256(const std::string& data) {
  Sha256Digest digest{};
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != digest.size()) {
    throw Error(ErrorKind::Cache, "OpenSSL EVP_Digest(SHA-256) failed");
  }
  return digest;
}

std::string to_hex(const Sha256Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * digest.size());
  for (unsigned char byte : digest) {
    out.push_back(kDigits[byte >> 4]);
    out.push_back(kDigits[byte & 15]);
  }
  return out;
}

}  // namespace flashjit::rt
