// What a tune DB entry is keyed by: the GPU it was measured on, the spec (its semantic fields,
// not its name) and the shape bucket. An entry applies only where all three match.
#pragma once

#include <compare>
#include <string>

#include "flashjit/flashjit.h"

namespace flashjit::tune {

// Everything about the machine that can change which tiles are fastest or whether a cubin
// behaves the same: an entry measured under another driver or NVRTC is not trusted.
struct GpuIdentity {
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int driver_version = 0;
  std::string nvrtc_version;
  bool operator==(const GpuIdentity&) const = default;
};

// The identity of the GPU `device` describes, with this process's NVRTC version.
GpuIdentity gpu_identity(const DeviceInfo& device);
// "NVIDIA H200 (cc 9.0, 132 SMs, driver 13000, NVRTC 13.0)" for messages.
std::string describe(const GpuIdentity& gpu);

// Hex SHA-256 over the fields that change the generated kernel apart from its tiles:
// head dims, dtype, causal, the mask and its parameters (window, block sizes, pattern), arch
// and warp specialization. Not the name (two files describing the same kernel share their
// tuning), not the tiles (what is tuned).
std::string spec_hash(const Spec& spec);
// "bf16 qk128 v128 causal" for tables and the DB's human-readable field.
std::string spec_summary(const Spec& spec);

// A shape rounded up: seqlen_q, seqlen_k and batch * heads_q, each to a power of two.
struct ShapeBucket {
  int seqlen_q = 0;
  int seqlen_k = 0;
  int batch_heads = 0;
  auto operator<=>(const ShapeBucket&) const = default;
};

// The smallest power of two >= value (value >= 1).
int round_up_pow2(int value);
ShapeBucket bucket_for(int seqlen_q, int seqlen_k, int batch, int heads_q);
// "q4096 k4096 bh64"
std::string describe(const ShapeBucket& bucket);

}  // namespace flashjit::tune
