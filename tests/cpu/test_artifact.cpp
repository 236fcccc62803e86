// The artifact format shared by cache entries and bundles: round trips, the golden files that
// pin its bytes, and a reader that range-checks every field of a frame whose checksum is valid.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "flashjit/flashjit.h"
#include "runtime/artifact.h"
#include "runtime/byte_fields.h"
#include "runtime/sha256.h"
#include "tests/cpu/runtime_test_support.h"

using flashjit::Error;
using flashjit::ErrorKind;
using namespace flashjit::rt;

namespace {

// Every field set, none to a default: the golden files hold exactly this.
Artifact golden_artifact() {
  Artifact a;
  a.cache_key = sha256_hex("cache key");
  a.kernel_name = "fa_fwd_qk64_v64_fp16_full_m64n64w4s2_a16_sm80";
  a.target = "sm_80";
  a.source_sha256 = sha256_hex("source");
  a.spec_name = "golden";
  a.spec_yaml = "name: golden\nhead_dim: 64\n";
  a.align_bytes = 8;
  a.tiles = {64, 32, 4, 2};
  a.cubin = flashjit::test::fake_cubin(std::string("\0\1\2cubin", 8));
  a.ptx = ".version 9.0\n";
  a.ptxas_log = "ptxas info    : Used 96 registers\n";
  return a;
}

Bundle golden_bundle() {
  Artifact second = golden_artifact();
  second.target = "sm_90a";
  second.ptx.clear();
  return {"0.1.0", "13.0", {golden_artifact(), second}};
}

std::string golden_path(const char* stem, const char* extension) {
  return fmt::format("{}/tests/cpu/golden/{}_v{}.{}", FLASHJIT_SOURCE_DIR, stem,
                     kArtifactFormatVersion, extension);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Compares `bytes` with the golden file, or rewrites it under FLASHJIT_UPDATE_GOLDEN=1.
void check_golden(const std::string& path, const std::string& bytes) {
  if (const char* update = std::getenv("FLASHJIT_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    MESSAGE("rewrote " << path);
  }
  REQUIRE_MESSAGE(std::filesystem::exists(path),
                  path << " is missing: a new kArtifactFormatVersion needs new golden files "
                          "(run this test with FLASHJIT_UPDATE_GOLDEN=1 and commit them)");
  CHECK_MESSAGE(slurp(path) == bytes,
                "the artifact format changed without a bump of kArtifactFormatVersion "
                "(runtime/artifact.h), or " << path << " is stale");
}

// A frame with a valid checksum around any body, as a forger would make one.
std::string forge(std::string_view magic, uint32_t version, const std::string& body) {
  ByteWriter out;
  out.raw(magic);
  out.u32(version);
  out.u64(body.size());
  out.raw(body);
  const Sha256Digest digest = sha256(body);
  out.raw(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
  return out.take();
}

std::string refusal(const std::function<void()>& decode, ErrorKind expected = ErrorKind::Io) {
  try {
    decode();
  } catch (const Error& error) {
    CHECK(error.kind() == expected);
    return error.what();
  }
  FAIL("accepted");
  return "";
}

// Why decoding `a` after encoding it fails.
std::string refusal_of(const Artifact& a) {
  const std::string bytes = encode_artifact(a);
  return refusal([&] { decode_artifact(bytes); });
}

}  // namespace

TEST_CASE("artifact: encode then decode gives back every field") {
  const Artifact a = golden_artifact();
  CHECK(decode_artifact(encode_artifact(a)) == a);
  const Bundle b = golden_bundle();
  const Bundle back = decode_bundle(encode_bundle(b));
  CHECK(back.generator_version == b.generator_version);
  CHECK(back.nvrtc_version == b.nvrtc_version);
  CHECK(back.kernels == b.kernels);
}

TEST_CASE("artifact: the golden files pin the bytes of this format version") {
  check_golden(golden_path("artifact", "fjk"), encode_artifact(golden_artifact()));
  check_golden(golden_path("bundle", "fjb"), encode_bundle(golden_bundle()));
  CHECK(decode_artifact(slurp(golden_path("artifact", "fjk"))) == golden_artifact());
  CHECK(decode_bundle(slurp(golden_path("bundle", "fjb"))).kernels == golden_bundle().kernels);
}

TEST_CASE("artifact: every field is range-checked, even under a valid checksum") {
  Artifact a = golden_artifact();
  SUBCASE("empty cubin") {
    a.cubin.clear();
    CHECK(refusal_of(a).find("field cubin: not an ELF64 image") != std::string::npos);
  }
  SUBCASE("a cubin that is not ELF") {
    a.cubin = std::string(100, 'x');
    CHECK(refusal_of(a).find("field cubin: not an ELF64 image") != std::string::npos);
  }
  SUBCASE("an ELF for another machine") {
    a.cubin[18] = 62;  // EM_X86_64
    CHECK(refusal_of(a).find("ELF machine 62 is not CUDA") != std::string::npos);
  }
  SUBCASE("alignment") {
    a.align_bytes = 3;
    CHECK(refusal_of(a).find("field align_bytes: 3 is not 2, 4, 8 or 16") != std::string::npos);
  }
  SUBCASE("tiles of zero and of 2^31") {
    a.tiles.block_m = 0;
    CHECK(refusal_of(a).find("field block_m: 0 is outside 1..1024") != std::string::npos);
    a.tiles.block_m = 64;
    a.tiles.block_n = 1 << 30;
    CHECK(refusal_of(a).find("field block_n: 1073741824 is outside 0..1024") != std::string::npos);
    a.tiles.block_n = 0;  // a row pass (bwd_pre) has no key tiles
    CHECK_NOTHROW(decode_artifact(encode_artifact(a)));
    a.tiles.stages = 1 << 30;
    CHECK(refusal_of(a).find("field stages: 1073741824 is outside") != std::string::npos);
  }
  SUBCASE("kernel name") {
    a.kernel_name = "../../etc/passwd";
    CHECK(refusal_of(a).find("field kernel_name") != std::string::npos);
    a.kernel_name = std::string(300, 'k');
    CHECK(refusal_of(a).find("field kernel_name: truncated or over 256 bytes") !=
          std::string::npos);
  }
  SUBCASE("target") {
    a.target = "sm_70";
    CHECK(refusal_of(a).find("field target: 'sm_70' is not a known target") !=
          std::string::npos);
  }
  SUBCASE("text that messages and the bundle manifest show") {
    // Found by fuzz/fuzz_bundle: a byte that is not UTF-8 made the manifest's JSON dump throw.
    a.spec_name = "gold\xb1";
    CHECK(refusal_of(a).find("field spec_name: byte 0xb1 at offset 4 is not printable ASCII") !=
          std::string::npos);
    a.spec_name = "golden";
    a.spec_yaml = "name: golden\n\x1b[2Jhead_dim: 64\n";  // a terminal escape
    CHECK(refusal_of(a).find("field spec_yaml: byte 0x1b at offset 13") != std::string::npos);
  }
  SUBCASE("digests") {
    a.source_sha256 = "not hex";
    CHECK(refusal_of(a).find("field source_sha256: not a hex SHA-256") != std::string::npos);
    a.source_sha256 = golden_artifact().source_sha256;
    a.cache_key = std::string(64, 'G');
    CHECK(refusal_of(a).find("field cache_key: not a hex SHA-256") != std::string::npos);
  }
}

TEST_CASE("artifact: forged frames are refused without trusting their lengths") {
  const std::string good = encode_artifact(golden_artifact());
  SUBCASE("the largest version is reported exactly, as a Usage error") {
    std::string bytes = good;
    bytes.replace(8, 4, "\xff\xff\xff\xff");
    CHECK(refusal([&] { decode_artifact(bytes); }, ErrorKind::Usage)
              .find("format version 4294967295 (this flashjit reads") != std::string::npos);
  }
  SUBCASE("a body size of 2^60") {
    std::string bytes = good;
    bytes.replace(12, 8, std::string("\0\0\0\0\0\0\0\x10", 8));
    CHECK(refusal([&] { decode_artifact(bytes); }).find("truncated") != std::string::npos);
  }
  SUBCASE("a field length past the body, under a valid checksum") {
    ByteWriter body;
    body.u64(uint64_t{1} << 62);
    const std::string bytes = forge("FJKERNEL", kArtifactFormatVersion, body.bytes());
    CHECK(refusal([&] { decode_artifact(bytes); }).find("field cache_key: truncated") !=
          std::string::npos);
  }
  SUBCASE("a bundle promising 2^62 kernels") {
    ByteWriter body;
    body.field("0.1.0");
    body.field("13.0");
    body.u64(uint64_t{1} << 62);
    const std::string bytes = forge("FJBUNDLE", kArtifactFormatVersion, body.bytes());
    CHECK(refusal([&] { decode_bundle(bytes); })
              .find("field kernels: truncated or more than the bytes left hold") !=
          std::string::npos);
  }
  SUBCASE("a bundle whose generator version is not printable") {
    Bundle bundle = golden_bundle();
    bundle.generator_version = "0.1\xff";
    const std::string bytes = encode_bundle(bundle);
    CHECK(refusal([&] { decode_bundle(bytes); })
              .find("field generator_version: byte 0xff at offset 3") != std::string::npos);
  }
  SUBCASE("a bundle inside a bundle: frames do not nest") {
    ByteWriter body;
    body.field("0.1.0");
    body.field("13.0");
    body.u64(1);
    body.field(encode_bundle(golden_bundle()));
    const std::string bytes = forge("FJBUNDLE", kArtifactFormatVersion, body.bytes());
    CHECK(refusal([&] { decode_bundle(bytes); }).find("kernel #0: no FJKERNEL header") !=
          std::string::npos);
  }
  SUBCASE("trailing bytes after the last field") {
    std::string body = good.substr(20, good.size() - 20 - 32) + "x";
    const std::string bytes = forge("FJKERNEL", kArtifactFormatVersion, body);
    CHECK(refusal([&] { decode_artifact(bytes); }).find("bytes after the last field") !=
          std::string::npos);
  }
}
