// The element types a kernel reads and writes, one struct each: how an element is stored, its
// size, the K of one tensor-core step, the conversion of two fp32 values into one 32-bit
// register of elements, and of one element to fp32. The generator picks one as KernelConfig::Element
// (generator/emit.cpp); the host's table of the same types must agree on kBytes and kMmaK.
#pragma once

#include "../arch/common.cuh"

namespace fj {

// The sizes are enumerators rather than static constexpr members: NVRTC (-default-device)
// emits each of those as a global variable into every program.
struct Fp16 {
  using Storage = u16;  // the bits: the kernels only copy elements and convert fp32 to them
  enum : int { kBytes = 2, kMmaK = 16 };  // kMmaK: mma.sync m16n8k16, wgmma m64nNk16
  // Two floats into one register: lo in bits 0..15, hi in bits 16..31 (round to nearest).
  static __device__ __forceinline__ u32 pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  static __device__ __forceinline__ float to_float(Storage bits) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
};

struct Bf16 {
  using Storage = u16;
  enum : int { kBytes = 2, kMmaK = 16 };
  static __device__ __forceinline__ u32 pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  // bf16 is the top half of an fp32: the conversion is exact.
  static __device__ __forceinline__ float to_float(Storage bits) {
    return __uint_as_float(static_cast<u32>(bits) << 16);
  }
};

}  // namespace fj
