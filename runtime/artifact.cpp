#include "runtime/artifact.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "generator/plan.h"
#include "runtime/byte_fields.h"
#include "runtime/sha256.h"

namespace flashjit::rt {
namespace {

constexpr std::string_view kArtifactMagic = "FJKERNEL";
constexpr std::string_view kBundleMagic = "FJBUNDLE";
constexpr size_t kDigestBytes = sizeof(Sha256Digest);

// Field limits, generous for real kernels and small enough that a forged length is refused
// before it is believed.
constexpr uint64_t kMaxNameBytes = 256;
constexpr uint64_t kMaxTextBytes = uint64_t{1} << 20;  // spec YAML, ptxas log
constexpr uint64_t kMaxCodeBytes = uint64_t{120} << 20;  // cubin, PTX
constexpr uint32_t kMaxTile = 1024;
constexpr uint16_t kElfMachineCuda = 190;  // EM_CUDA

Error corrupt(const std::string& why) { return Error(ErrorKind::Io, why); }

std::string digest_bytes(std::string_view body) {
  const Sha256Digest digest = sha256(std::string(body));
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

std::string frame(std::string_view magic, const std::string& body) {
  ByteWriter out;
  out.raw(magic);
  out.u32(kArtifactFormatVersion);
  out.u64(body.size());
  out.raw(body);
  out.raw(digest_bytes(body));
  return out.take();
}

// The checked body of a frame: magic, version, exact size, checksum.
std::string_view unframe(std::string_view bytes, std::string_view magic, uint64_t max_bytes) {
  if (bytes.size() > max_bytes)
    throw corrupt(fmt::format("{} bytes, over the limit of {}", bytes.size(), max_bytes));
  ByteReader in(bytes);
  std::string_view found;
  if (!in.raw(found, magic.size()) || found != magic)
    throw corrupt(fmt::format("no {} header", magic));
  uint32_t version = 0;
  if (!in.u32(version)) throw corrupt("truncated header");
  if (version != kArtifactFormatVersion)
    throw Error(ErrorKind::Usage, fmt::format("format version {} (this flashjit reads {})",
                                              version, kArtifactFormatVersion));
  uint64_t size = 0;
  std::string_view body, checksum;
  if (!in.u64(size) || !in.raw(body, size) || !in.raw(checksum, kDigestBytes) || !in.at_end())
    throw corrupt("truncated, or bytes past its end");
  if (checksum != digest_bytes(body)) throw corrupt("checksum mismatch (truncated or modified)");
  return body;
}

class FieldReader {
 public:
  explicit FieldReader(std::string_view body) : in_(body) {}

  std::string text(const char* name, uint64_t max_size) {
    std::string_view value;
    if (!in_.field(value, max_size))
      throw corrupt(fmt::format("field {}: truncated or over {} bytes", name, max_size));
    return std::string(value);
  }
  // Text that messages and the bundle manifest (JSON, which must be UTF-8) show: printable
  // ASCII, and line breaks where `lines` allows them, as flashjit itself writes these fields.
  std::string printable(const char* name, uint64_t max_size, bool lines) {
    std::string value = text(name, max_size);
    const auto bad = std::find_if(value.begin(), value.end(), [lines](char c) {
      return !(c >= 0x20 && c < 0x7f) && !(lines && c == '\n');
    });
    if (bad != value.end())
      throw corrupt(fmt::format("field {}: byte 0x{:02x} at offset {} is not printable ASCII",
                                name, static_cast<unsigned char>(*bad), bad - value.begin()));
    return value;
  }
  std::string hex_digest(const char* name) {
    std::string value = text(name, 64);
    if (value.size() != 64 || value.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw corrupt(fmt::format("field {}: not a hex SHA-256", name));
    return value;
  }
  int number(const char* name, uint32_t low, uint32_t high) {
    uint32_t value = 0;
    if (!in_.u32(value)) throw corrupt(fmt::format("field {}: truncated", name));
    if (value < low || value > high)
      throw corrupt(fmt::format("field {}: {} is outside {}..{}", name, value, low, high));
    return static_cast<int>(value);
  }
  uint64_t count(const char* name, uint64_t min_item_bytes) {
    uint64_t value = 0;
    if (!in_.u64(value) || value > in_.left() / min_item_bytes)
      throw corrupt(fmt::format("field {}: truncated or more than the bytes left hold", name));
    return value;
  }
  void expect_end() {
    if (!in_.at_end()) throw corrupt("bytes after the last field");
  }

 private:
  ByteReader in_;
};

void check_cubin(const std::string& cubin) {
  // An ELF64 little-endian image whose machine is EM_CUDA: anything else would only fail
  // later, at module load, with the driver's less helpful error.
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(cubin[i]); };
  if (cubin.size() < 64 || cubin.compare(0, 4, "\x7f" "ELF") != 0 || byte(4) != 2 ||
      byte(5) != 1)
    throw corrupt("field cubin: not an ELF64 image");
  const uint16_t machine = static_cast<uint16_t>(byte(18) | (byte(19) << 8));
  if (machine != kElfMachineCuda)
    throw corrupt(fmt::format("field cubin: ELF machine {} is not CUDA ({})", machine,
                              kElfMachineCuda));
}

}  // namespace

std::string encode_artifact(const Artifact& a) {
  ByteWriter body;
  for (const std::string* field : {&a.cache_key, &a.kernel_name, &a.target, &a.source_sha256,
                                   &a.spec_name, &a.spec_yaml})
    body.field(*field);
  for (const int number : {a.align_bytes, a.tiles.block_m, a.tiles.block_n, a.tiles.warps,
                           a.tiles.stages})
    body.u32(static_cast<uint32_t>(number));
  for (const std::string* field : {&a.cubin, &a.ptx, &a.ptxas_log}) body.field(*field);
  return frame(kArtifactMagic, body.bytes());
}

Artifact decode_artifact(std::string_view bytes) {
  FieldReader in(unframe(bytes, kArtifactMagic, kMaxArtifactBytes));
  Artifact a;
  a.cache_key = in.hex_digest("cache_key");
  a.kernel_name = in.text("kernel_name", kMaxNameBytes);
  if (a.kernel_name.empty() ||
      !std::all_of(a.kernel_name.begin(), a.kernel_name.end(),
                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }))
    throw corrupt("field kernel_name: empty or not an identifier");
  a.target = in.text("target", kMaxNameBytes);
  if (!gen::is_known_target(a.target))
    throw corrupt(fmt::format("field target: '{}' is not a known target", a.target));
  a.source_sha256 = in.hex_digest("source_sha256");
  a.spec_name = in.printable("spec_name", kMaxNameBytes, false);
  a.spec_yaml = in.printable("spec_yaml", kMaxTextBytes, true);
  a.align_bytes = in.number("align_bytes", 2, 16);
  if (a.align_bytes != 2 && a.align_bytes != 4 && a.align_bytes != 8 && a.align_bytes != 16)
    throw corrupt(fmt::format("field align_bytes: {} is not 2, 4, 8 or 16", a.align_bytes));
  a.tiles.block_m = in.number("block_m", 1, kMaxTile);
  // 0: a path without key tiles or a pipeline (the backward's row passes, bwd_pre).
  a.tiles.block_n = in.number("block_n", 0, kMaxTile);
  a.tiles.warps = in.number("warps", 1, kMaxTile);
  a.tiles.stages = in.number("stages", 0, kMaxTile);
  a.cubin = in.text("cubin", kMaxCodeBytes);
  check_cubin(a.cubin);
  a.ptx = in.text("ptx", kMaxCodeBytes);
  a.ptxas_log = in.text("ptxas_log", kMaxTextBytes);
  in.expect_end();
  return a;
}

std::string encode_bundle(const Bundle& bundle) {
  ByteWriter body;
  body.field(bundle.generator_version);
  body.field(bundle.nvrtc_version);
  body.u64(bundle.kernels.size());
  for (const Artifact& kernel : bundle.kernels) body.field(encode_artifact(kernel));
  return frame(kBundleMagic, body.bytes());
}

Bundle decode_bundle(std::string_view bytes) {
  FieldReader in(unframe(bytes, kBundleMagic, kMaxBundleBytes));
  Bundle bundle;
  bundle.generator_version = in.printable("generator_version", kMaxNameBytes, false);
  bundle.nvrtc_version = in.printable("nvrtc_version", kMaxNameBytes, false);
  // Each kernel takes at least its length prefix, so the count cannot promise more than fits.
  const uint64_t count = in.count("kernels", 8);
  for (uint64_t i = 0; i < count; ++i) {
    try {
      bundle.kernels.push_back(decode_artifact(in.text("kernel", kMaxArtifactBytes)));
    } catch (const Error& error) {
      throw Error(error.kind(), fmt::format("kernel #{}: {}", i, error.what()));
    }
  }
  in.expect_end();
  return bundle;
}

}  // namespace flashjit::rt
