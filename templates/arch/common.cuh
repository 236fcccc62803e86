// Device helpers every target has: integer aliases (NVRTC sees no system headers),
// shared-memory addressing, the hardware exp2, a 16-byte global store and programmatic
// dependent launch.
#pragma once

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

namespace fj {

__device__ __forceinline__ u32 smem_u32(const void* ptr) {
  return static_cast<u32>(__cvta_generic_to_shared(ptr));
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

// 2^x with the hardware approximation (relative error ~2^-22); 2^-inf = +0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One 16-byte global store, written in PTX: NVVM splits some uint4 stores into four 4-byte
// ones when it cannot prove the 16-byte alignment that the caller guarantees.
__device__ __forceinline__ void st_global_v4(void* ptr, const u32 (&v)[4]) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v[0]), "r"(v[1]),
               "r"(v[2]), "r"(v[3])
               : "memory");
}

// Programmatic dependent launch (sm_90 on; no-ops before). A kernel the runtime launches
// with its overlap flag may start while the launch before it is finishing: it waits here
// before it reads what that launch wrote. The earlier kernel lets it start early with
// allow_dependent_launch(), else at its end.
__device__ __forceinline__ void wait_for_previous_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

}  // namespace fj
