// The 16-bit element types: conversion from fp32 and the m16n8k16 tensor-core product with
// fp32 accumulation. The generator picks one as KernelConfig::Element.
#pragma once

#include "common.cuh"

namespace fj {

// D (16x8 fp32) += A (16x16, row-major fragment) * B (16x8, column-major fragment).
#define FJ_MMA_M16N8K16(TYPE)                                                               \
  asm("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 "                        \
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                   \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                      \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))

struct Fp16 {
  // Two floats into one register: lo in bits 0..15, hi in bits 16..31 (round to nearest).
  static __device__ __forceinline__ u32 pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    FJ_MMA_M16N8K16("f16");
  }
};

struct Bf16 {
  static __device__ __forceinline__ u32 pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    FJ_MMA_M16N8K16("bf16");
  }
};

#undef FJ_MMA_M16N8K16

}  // namespace fj
