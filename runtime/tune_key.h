// What a tune DB entry is keyed by: the GPU it was measured on, the spec (its semantic fields,
// not its name) and the shape bucket (a forward shape's for tiles, a decode call's for key
// splits). An entry applies only where all three match.
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

// A decode call rounded up, each size to a power of two, for its key-split count. The best
// count trades the unsplit grid's CTAs (a row tile of the packed rows for each batch x KV
// head) against the GPU's slots, and each split's key tiles (seqlen_k) against the combine:
// so the packed rows (seqlen_q x the GQA group: the tile height), seqlen_k and batch x
// heads_kv, not heads_q or seqlen_q apart.
struct DecodeBucket {
  int packed_rows = 0;
  int seqlen_k = 0;
  int batch_heads_kv = 0;
  auto operator<=>(const DecodeBucket&) const = default;
};
DecodeBucket decode_bucket_for(int packed_rows, int seqlen_k, int batch, int heads_kv);
// "r4 k32768 bhkv128"
std::string describe(const DecodeBucket& bucket);

}  // namespace flashjit::tune
