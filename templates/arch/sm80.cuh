// Ampere (sm_80 and later) instructions as inline PTX: the asynchronous global->shared copy,
// ldmatrix, movmatrix and the m16n8k16 tensor-core product. The sm80 kernel also runs on
// Hopper, so every target from sm_80 on may include this.
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "templates/arch/sm80.cuh needs sm_80 or later (cp.async, ldmatrix, mma.sync bf16)"
#endif

#include "common.cuh"

namespace fj {

// Asynchronous global->shared copy of BYTES bytes, of which only the first src_bytes are
// read; the rest of the destination is zero-filled (sequence ends, head-dim padding).
// L2_PREFETCH asks L2 for the whole 128-byte line of a 16-byte copy: decode, which streams
// its cache once, ran 1-2.5% faster with it on the H200 (bench/NOTES.md entries 26 and 28).
template <int BYTES, bool L2_PREFETCH = false>
__device__ __forceinline__ void cp_async(void* dst, const void* src, int src_bytes) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  static_assert(!L2_PREFETCH || BYTES == 16, "the L2 prefetch hint is for 16-byte copies");
  if constexpr (BYTES == 16 && L2_PREFETCH) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(src_bytes));
  } else if constexpr (BYTES == 16) {
    // .cg bypasses L1: K/V tiles are read once per CTA, L2 serves the re-reads.
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_u32(dst)),
                 "l"(src), "n"(BYTES), "r"(src_bytes));
  }
}

// A 16-byte cp.async that reads all 16 bytes: without the source-size operand there is no
// size to compute and no zero-fill (SASS LDGSTS without .ZFILL). dst is a shared-memory
// address (smem_u32), so callers can step it by constants.
template <bool L2_PREFETCH = false>
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src) {
  if constexpr (L2_PREFETCH) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 16-bit matrices from shared memory; lanes 8i..8i+7 give the row addresses of
// matrix i. Each thread receives row lane/4, columns 2*(lane%4)+{0,1} of each matrix.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The same, transposed: each thread receives column lane/4, rows 2*(lane%4)+{0,1}.
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Two 8x8 16-bit matrices, as ldmatrix_x4 (lanes 0..15 give the row addresses).
__device__ __forceinline__ void ldmatrix_x2(u32 (&r)[2], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// The transpose of an 8x8 16-bit matrix held in registers as ldmatrix leaves one (each
// thread row lane/4, columns 2*(lane%4)+{0,1}), returned in the same layout.
__device__ __forceinline__ u32 movmatrix_trans(u32 x) {
  u32 r;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
  return r;
}

// D (16x8 fp32) += A (16x16, row-major fragment) * B (16x8, column-major fragment), for each
// 16-bit input type.
#define FJ_MMA_M16N8K16(TYPE)                                                               \
  asm("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 "                        \
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                   \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                      \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))

__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const u32 (&a)[4], u32 b0,
                                                 u32 b1) {
  FJ_MMA_M16N8K16("f16");
}
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const u32 (&a)[4], u32 b0,
                                                  u32 b1) {
  FJ_MMA_M16N8K16("bf16");
}

#undef FJ_MMA_M16N8K16

}  // namespace fj
