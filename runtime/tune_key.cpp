#include "runtime/tune_key.h"

#include <bit>

#include <fmt/format.h>

#include "generator/spec_fields.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/sha256.h"

namespace flashjit::tune {

GpuIdentity gpu_identity(const DeviceInfo& device) {
  GpuIdentity gpu;
  gpu.name = device.name;
  gpu.cc_major = device.cc_major;
  gpu.cc_minor = device.cc_minor;
  gpu.sm_count = device.sm_count;
  gpu.driver_version = device.driver_version;
  // An application whose kernels all come from bundles may run without NVRTC: its tune DB
  // entries (keyed by an NVRTC version) then match nothing and the heuristic applies.
  gpu.nvrtc_version = rt::nvrtc_available() ? rt::nvrtc_version() : "none";
  return gpu;
}

std::string describe(const GpuIdentity& gpu) {
  return fmt::format("{} (cc {}.{}, {} SMs, driver {}, NVRTC {})", gpu.name, gpu.cc_major,
                     gpu.cc_minor, gpu.sm_count, gpu.driver_version, gpu.nvrtc_version);
}

std::string spec_hash(const Spec& spec) {
  // Versioned: changing what is hashed (a hashed row of the field table) must change "v3".
  return rt::sha256_hex("flashjit-tune-spec-v3;" + gen::canonical_spec_fields(spec));
}

std::string spec_summary(const Spec& spec) {
  return fmt::format("{} qk{} v{} {}{}", to_string(spec.dtype), spec.head_dim_qk,
                     spec.head_dim_v, spec.causal ? "causal" : "full",
                     spec.warp_specialization ? " ws" : "");
}

int round_up_pow2(int value) {
  if (value < 1)
    throw Error(ErrorKind::Shape, fmt::format("shape bucket of {}: sizes must be >= 1", value));
  return static_cast<int>(std::bit_ceil(static_cast<unsigned>(value)));
}

ShapeBucket bucket_for(int seqlen_q, int seqlen_k, int batch, int heads_q) {
  return ShapeBucket{round_up_pow2(seqlen_q), round_up_pow2(seqlen_k),
                     round_up_pow2(batch * heads_q)};
}

std::string describe(const ShapeBucket& bucket) {
  return fmt::format("q{} k{} bh{}", bucket.seqlen_q, bucket.seqlen_k, bucket.batch_heads);
}

DecodeBucket decode_bucket_for(int packed_rows, int seqlen_k, int batch, int heads_kv) {
  return DecodeBucket{round_up_pow2(packed_rows), round_up_pow2(seqlen_k),
                      round_up_pow2(batch * heads_kv)};
}

std::string describe(const DecodeBucket& bucket) {
  return fmt::format("r{} k{} bhkv{}", bucket.packed_rows, bucket.seqlen_k,
                     bucket.batch_heads_kv);
}

}  // namespace flashjit::tune
