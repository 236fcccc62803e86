// The warp-level tensor-core product of each element type (the sm80 kernel's mma.sync):
// D (16x8 fp32) += A (16x16, row-major fragment) * B (16x8, column-major fragment).
#pragma once

#include "../arch/sm80.cuh"
#include "element.cuh"

namespace fj {

template <class Element>
struct WarpMma;

template <>
struct WarpMma<Fp16> {
  static __device__ __forceinline__ void m16n8k16(float (&d)[4], const u32 (&a)[4], u32 b0,
                                                  u32 b1) {
    mma_m16n8k16_f16(d, a, b0, b1);
  }
};

template <>
struct WarpMma<Bf16> {
  static __device__ __forceinline__ void m16n8k16(float (&d)[4], const u32 (&a)[4], u32 b0,
                                                  u32 b1) {
    mma_m16n8k16_bf16(d, a, b0, b1);
  }
};

}  // namespace fj
