// What tune DB entries are keyed by: shape buckets, the spec hash, the GPU identity.
#include <doctest/doctest.h>

#include "runtime/tune_key.h"

namespace flashjit::tune {

TEST_CASE("autotune: buckets round seqlens and batch x heads up to powers of two") {
  CHECK(round_up_pow2(1) == 1);
  CHECK(round_up_pow2(2) == 2);
  CHECK(round_up_pow2(3) == 4);
  CHECK(round_up_pow2(4096) == 4096);
  CHECK(round_up_pow2(4097) == 8192);
  CHECK_THROWS_AS(round_up_pow2(0), Error);
  const ShapeBucket b = bucket_for(1000, 4097, 3, 5);
  CHECK(b.seqlen_q == 1024);
  CHECK(b.seqlen_k == 8192);
  CHECK(b.batch_heads == 16);
  CHECK(describe(b) == "q1024 k8192 bh16");
  // The benchmark's 16k-token shapes land on their own values.
  CHECK(bucket_for(4096, 4096, 4, 16) == ShapeBucket{4096, 4096, 64});
  CHECK(bucket_for(4000, 4000, 4, 16) == bucket_for(4096, 4096, 4, 16));
}

TEST_CASE("autotune: the spec hash covers semantic fields, not the name or the tiles") {
  Spec a;
  a.name = "a";
  a.head_dim_qk = a.head_dim_v = 128;
  Spec renamed = a;
  renamed.name = "something else";
  Spec tiled = a;
  tiled.tiles = Tiles{64, 64, 4, 2};
  CHECK(spec_hash(a) == spec_hash(renamed));
  CHECK(spec_hash(a) == spec_hash(tiled));
  CHECK(spec_hash(a).size() == 64);

  const auto differs = [&](auto change) {
    Spec b = a;
    change(b);
    return spec_hash(b) != spec_hash(a);
  };
  CHECK(differs([](Spec& s) { s.head_dim_qk = 64; }));
  CHECK(differs([](Spec& s) { s.head_dim_v = 64; }));
  CHECK(differs([](Spec& s) { s.dtype = DType::F16; }));
  CHECK(differs([](Spec& s) { s.causal = true; }));
  CHECK(differs([](Spec& s) { s.arch = Arch::Sm80; }));
  CHECK(differs([](Spec& s) { s.warp_specialization = false; }));
  CHECK(differs([](Spec& s) { s.mask = flashjit::MaskKind::BlockSparse; }));
  CHECK(differs([](Spec& s) { s.block_q = 128; }));
  CHECK(differs([](Spec& s) { s.block_k = 128; }));
  CHECK(differs([](Spec& s) { s.pattern = flashjit::PatternKind::Strided; }));
  CHECK(differs([](Spec& s) { s.pattern_window = 1; }));
  CHECK(differs([](Spec& s) { s.pattern_stride = 1; }));
  CHECK(differs([](Spec& s) { s.pattern_global = 1; }));
  CHECK(spec_summary(a) == "bf16 qk128 v128 full ws");
}

TEST_CASE("autotune: the GPU identity includes the NVRTC version and compares every field") {
  DeviceInfo info;
  info.name = "NVIDIA H200";
  info.cc_major = 9;
  info.cc_minor = 0;
  info.sm_count = 132;
  info.driver_version = 13000;
  const GpuIdentity gpu = gpu_identity(info);
  CHECK(gpu.name == "NVIDIA H200");
  CHECK_FALSE(gpu.nvrtc_version.empty());
  GpuIdentity other = gpu;
  other.driver_version = 12080;
  CHECK_FALSE(other == gpu);
  other = gpu;
  other.nvrtc_version = "12.4";
  CHECK_FALSE(other == gpu);
  other = gpu;
  other.sm_count = 114;
  CHECK_FALSE(other == gpu);
  CHECK(describe(gpu).find("132 SMs") != std::string::npos);
}

}  // namespace flashjit::tune
