// Hopper (sm_90a) building blocks as inline PTX: mbarriers, TMA bulk tensor copies, the
// proxy fence, named barriers, register reallocation and the wgmma fence/commit/wait and
// shared-memory descriptors. The wgmma instructions themselves (one per N the kernel uses)
// are generated into the program by generator/wgmma_emit.cpp as specialisations of Wgmma<N>.
#pragma once

// NVRTC defines __CUDA_ARCH_FEAT_SM90_ALL for sm_90a only: plain sm_90 lacks wgmma and
// setmaxnreg.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "templates/arch/sm90.cuh needs the target sm_90a (wgmma, setmaxnreg, TMA)"
#endif

#include "common.cuh"

namespace fj {

// A CUtensorMap as the kernel sees it: 128 opaque bytes, 64-byte aligned, passed as a
// __grid_constant__ parameter (the runtime encodes it with cuTensorMapEncodeTiled).
struct alignas(64) TmaDesc {
  u64 opaque[16];
};

// ---------------------------------------------------------------- mbarrier
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// The producer's arrival that also announces how many bytes the TMA copies will deliver.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Announces bytes TMA copies will deliver to the barrier's current phase, without arriving.
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Spins until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "fj_wait:\n"  // labels are local to the { } scope, so every inlined copy may reuse it
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra fj_wait;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// A 32-bit word of shared memory, by address: the producer's hand-over of the next tile.
__device__ __forceinline__ void st_shared_u32(u32 addr, int value) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(value) : "memory");
}
__device__ __forceinline__ void st_shared_u64(u32 addr, u64 value) {
  asm volatile("st.shared.u64 [%0], %1;" ::"r"(addr), "l"(value) : "memory");
}
__device__ __forceinline__ u64 ld_shared_u64(u32 addr) {
  u64 value;
  asm volatile("ld.shared.u64 %0, [%1];" : "=l"(value) : "r"(addr) : "memory");
  return value;
}
__device__ __forceinline__ int ld_shared_u32(u32 addr) {
  int value;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(value) : "r"(addr) : "memory");
  return value;
}

// Makes this thread's shared-memory stores visible to the async proxy (wgmma, TMA) that reads
// them next.
// Four 8x8 tiles of 16-bit elements from registers (each as an mma accumulator fragment
// packed: row lane / 4, columns 2 (lane % 4) and the next) into shared memory transposed:
// lane 8i + r names where row r of tile i's transpose (column r of the fragment) goes.
__device__ __forceinline__ void stmatrix_x4_trans(u32 addr, const u32 (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Two floats to an 8-byte aligned shared address.
__device__ __forceinline__ void st_shared_f32x2(u32 addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

// ---------------------------------------------------------------- bulk reductions
// Adds `bytes` (a multiple of 16) of fp32 from shared address src to global dst, both 16-byte
// aligned: an asynchronous reduction performed in L2 whole lines at a time, tracked by this
// thread's bulk groups.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, u32 src, u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
               "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's bulk groups still read shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// Waits until at most N of this thread's bulk groups are still incomplete.
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------- order across CTAs
// A counter in global memory that one CTA releases and another acquires (the ordered dQ
// adds); the async-proxy fence orders bulk copies' global writes with them.
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// ---------------------------------------------------------------- TMA
// A 4-d box {c0 (innermost), c1, c2, c3} of `map` into shared memory at dst; completion is
// counted in bytes on `bar`. Rows outside the tensor arrive as zeros.
__device__ __forceinline__ void tma_load_4d(u32 dst, const TmaDesc* map, int c0, int c1, int c2,
                                            int c3, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_descriptor(const TmaDesc* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// ---------------------------------------------------------------- warp groups
// Named barrier `id` over `threads` threads (id 0 belongs to __syncthreads).
__device__ __forceinline__ void named_sync(u32 id, u32 threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(u32 id, u32 threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// The register split of the backward's kernels, three warp groups of 128 threads: 65536 / 384
// at launch (__launch_bounds__(384, 1)), the producer keeps 24 and each consumer thread
// claims 240, which is exactly what the producer frees (setmaxnreg only moves registers inside
// the CTA's allocation; with less, setmaxnreg.inc waits for ever).
namespace ws_regs {
enum : int { kLaunch = 168, kProducer = 24, kConsumer = 240 };
static_assert(128 * (kLaunch - kProducer) >= 256 * (kConsumer - kLaunch),
              "the consumers claim more registers than the producer frees");
}  // namespace ws_regs

template <int REGS>
__device__ __forceinline__ void regs_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void regs_claim() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}

// ---------------------------------------------------------------- wgmma
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most N committed wgmma groups of this warp group are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Shared-memory matrix descriptor for a tile in the swizzled layout TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B, _64B or _32B (rows of kRowBytes): start address >> 4 (bits
// 0-13), leading byte offset >> 4 (16-29), stride byte offset >> 4 (32-45), swizzle mode 1, 2
// or 3 (bits 62-63). Tiles are aligned to their swizzle pattern, so the base offset (bits
// 49-51) is 0; a tile's rows are kRowBytes apart, so SBO (8 rows) is 8 * kRowBytes.
//   K-major (Q, K): LBO unused.
//   MN-major (V):   LBO = bytes between panels of kRowBytes / 2 columns of 16-bit elements.
template <int kRowBytes>
__host__ __device__ constexpr u64 smem_desc_swizzled(u32 addr, u32 lbo) {
  static_assert(kRowBytes == 128 || kRowBytes == 64 || kRowBytes == 32, "TMA's swizzle spans");
  constexpr u64 mode = kRowBytes == 128 ? 1 : kRowBytes == 64 ? 2 : 3;
  return static_cast<u64>((addr & 0x3FFFFu) >> 4) | (static_cast<u64>((lbo >> 4) & 0x3FFFu) << 16) |
         (static_cast<u64>(((8 * kRowBytes) >> 4) & 0x3FFFu) << 32) | (mode << 62);
}

// The descriptor of a tile `bytes` further on (bytes < 2^18: the address field does not
// carry). Volatile, so that loop-invariant descriptors are rebuilt where they are used
// rather than hoisted into registers for the whole loop.
__device__ __forceinline__ u64 desc_advance(u64 desc, u32 bytes) {
  u64 out;
  asm volatile("add.s64 %0, %1, %2;" : "=l"(out) : "l"(desc), "l"(static_cast<u64>(bytes >> 4)));
  return out;
}

// D (64 x N fp32, N/2 registers a thread) from A and B; specialised per N by the generator:
//   ss(d, desc_a, desc_b, accumulate)  A and B K-major in shared memory
//   ss_mn(d, desc_a, desc_b, accumulate)  A and B MN-major in shared memory
//   ss_a_mn(d, desc_a, desc_b, accumulate)  A MN-major, B K-major in shared memory
//   rs(d, a[4], desc_b, accumulate)    A from registers, B MN-major in shared memory
template <int N>
struct Wgmma;

}  // namespace fj
