// The read ceiling of decode's K/V traffic on this GPU, without attention's arithmetic: each
// CTA streams one (batch, KV head)'s rows of a [batch, seqlen, heads, 128] bf16 K and V (256-byte
// rows, `heads` rows apart, as decode reads a dense cache), through a cp.async ring as
// kernels/dec_sm80.cuh does, through a TMA (cp.async.bulk.tensor) ring, and with plain 16-byte
// loads; and a device-to-device copy for the ANCHORS.md "copy ceiling". Prints ms and TB/s.
// bench/NOTES.md entry 38 has the H200's numbers.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o decode_stream_probe bench/decode_stream_probe.cu -lcuda
//   ./decode_stream_probe
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>

#define CK(x) do { auto e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

constexpr int D = 128;          // bf16 columns
constexpr int ROWB = D * 2;     // 256 bytes a row
constexpr int BN = 64;          // keys a tile
constexpr int TILEB = BN * ROWB;  // 16 KB

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

template <bool HINT>
__device__ __forceinline__ void cp16(void* dst, const void* src) {
  if (HINT)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" :: "r"(smem_u32(dst)), "l"(src));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem_u32(dst)), "l"(src));
}
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n"); }

// K, V: [batch, seq, heads, D]
template <int S, bool HINT, int THREADS>
__global__ void __launch_bounds__(THREADS) k_cpasync(const char* K, const char* V, int seq, int heads, unsigned* out) {
  extern __shared__ __align__(128) char sm[];
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const long long rs = (long long)heads * ROWB;
  const char* k = K + ((long long)b * seq * heads + h) * ROWB;
  const char* v = V + ((long long)b * seq * heads + h) * ROWB;
  const int tiles = seq / BN;
  auto load = [&](int t) {
    char* dk = sm + (t % S) * 2 * TILEB; char* dv = dk + TILEB;
#pragma unroll
    for (int i = tid; i < BN * (ROWB / 16); i += THREADS) {
      int r = i / (ROWB / 16), c = i % (ROWB / 16);
      cp16<HINT>(dk + r * ROWB + c * 16, k + (long long)(t * BN + r) * rs + c * 16);
      cp16<HINT>(dv + r * ROWB + c * 16, v + (long long)(t * BN + r) * rs + c * 16);
    }
  };
  for (int s = 0; s < S - 1; ++s) { load(s); cp_commit(); }
  unsigned acc = 0;
  for (int j = 0; j < tiles; ++j) {
    cp_wait<S - 2>();
    __syncthreads();
    if (j + S - 1 < tiles) load(j + S - 1);
    cp_commit();
    const unsigned* t = (const unsigned*)(sm + (j % S) * 2 * TILEB);
    acc ^= t[tid] + t[tid + 4096];
  }
  if (acc == 0x12345678u) out[0] = acc;
}

__device__ __forceinline__ void mbar_init(uint64_t* b, int n) { asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" :: "r"(smem_u32(b)), "r"(n)); }
__device__ __forceinline__ void mbar_expect(uint64_t* b, int bytes) { asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" :: "r"(smem_u32(b)), "r"(bytes)); }
__device__ __forceinline__ void mbar_wait(uint64_t* b, int parity) {
  asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n @!p bra W;\n}\n" :: "r"(smem_u32(b)), "r"(parity));
}
__device__ __forceinline__ void tma4(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
               :: "r"(smem_u32(dst)), "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}

template <int S, int THREADS, int PANEL>
__global__ void __launch_bounds__(THREADS) k_tma(const __grid_constant__ CUtensorMap mk, const __grid_constant__ CUtensorMap mv, int seq, unsigned* out) {
  extern __shared__ __align__(1024) char sm_raw[];
  char* sm = (char*)(((uintptr_t)sm_raw + 1023) & ~(uintptr_t)1023);
  __shared__ uint64_t full[S];
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int tiles = seq / BN;
  if (tid == 0) { for (int s = 0; s < S; ++s) mbar_init(&full[s], 1); asm volatile("fence.mbarrier_init.release.cluster;\n"); }
  __syncthreads();
  auto load = [&](int t) {
    char* dk = sm + (t % S) * 2 * TILEB; char* dv = dk + TILEB;
    mbar_expect(&full[t % S], 2 * TILEB);
#pragma unroll
    for (int p = 0; p < D / PANEL; ++p) {
      tma4(dk + p * BN * PANEL * 2, &mk, &full[t % S], p * PANEL, h, t * BN, b);
      tma4(dv + p * BN * PANEL * 2, &mv, &full[t % S], p * PANEL, h, t * BN, b);
    }
  };
  if (tid == 0) for (int s = 0; s < S - 1 && s < tiles; ++s) load(s);
  unsigned acc = 0;
  for (int j = 0; j < tiles; ++j) {
    __syncthreads();
    if (tid == 0 && j + S - 1 < tiles) load(j + S - 1);
    mbar_wait(&full[j % S], (j / S) & 1);
    const unsigned* t = (const unsigned*)(sm + (j % S) * 2 * TILEB);
    acc ^= t[tid] + t[tid + 4096];
  }
  if (acc == 0x12345678u) out[0] = acc;
}

template <int THREADS>
__global__ void __launch_bounds__(THREADS) k_ldg(const char* K, const char* V, int seq, int heads, unsigned* out) {
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const long long rs = (long long)heads * ROWB;
  const char* k = K + ((long long)b * seq * heads + h) * ROWB;
  const char* v = V + ((long long)b * seq * heads + h) * ROWB;
  unsigned acc = 0;
  constexpr int PER = THREADS / 16;  // rows a pass
  for (int r0 = 0; r0 < seq; r0 += PER * 8) {
    uint4 x[16];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      int r = r0 + u * PER + tid / 16, c = tid % 16;
      x[2*u] = __ldg((const uint4*)(k + (long long)r * rs + c * 16));
      x[2*u+1] = __ldg((const uint4*)(v + (long long)r * rs + c * 16));
    }
#pragma unroll
    for (int u = 0; u < 16; ++u) acc ^= x[u].x + x[u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}

typedef CUresult (*EncodeFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

int main() {
  const int batch = 64, heads = 8, seq = 32768;
  const size_t bytes = (size_t)batch * seq * heads * ROWB;
  char *K, *V; unsigned* out;
  CK(cudaMalloc(&K, bytes)); CK(cudaMalloc(&V, bytes)); CK(cudaMalloc(&out, 4));
  CK(cudaMemset(K, 1, bytes)); CK(cudaMemset(V, 1, bytes));
  void* fn; cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  EncodeFn enc = (EncodeFn)fn;
  auto make = [&](char* base, int panel, CUtensorMapSwizzle sw, CUtensorMapL2promotion l2) {
    CUtensorMap m;
    cuuint64_t dims[4] = {D, (cuuint64_t)heads, (cuuint64_t)seq, (cuuint64_t)batch};
    cuuint64_t strides[3] = {ROWB, (cuuint64_t)heads * ROWB, (cuuint64_t)seq * heads * ROWB};
    cuuint32_t box[4] = {(cuuint32_t)panel, 1, BN, 1}, es[4] = {1, 1, 1, 1};
    CUresult r = enc(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, base, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { printf("encode failed %d\n", r); exit(1); }
    return m;
  };
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  auto time = [&](const char* name, auto launch) {
    launch(); CK(cudaDeviceSynchronize());
    std::vector<float> v;
    for (int i = 0; i < 7; ++i) { cudaEventRecord(e0); launch(); cudaEventRecord(e1); CK(cudaEventSynchronize(e1)); float ms; cudaEventElapsedTime(&ms, e0, e1); v.push_back(ms); }
    std::sort(v.begin(), v.end());
    printf("%-40s %.3f ms  %.2f TB/s\n", name, v[3], 2.0 * bytes / v[3] / 1e9);
  };
  dim3 grid(heads, batch);
#define CPA(S, H, T) { auto f = k_cpasync<S, H, T>; int sm = S * 2 * TILEB; CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, sm)); \
    time("cp.async S=" #S " hint=" #H " threads=" #T, [&] { f<<<grid, T, sm>>>(K, V, seq, heads, out); }); }
  CPA(3, true, 128) CPA(3, false, 128) CPA(4, true, 128) CPA(2, true, 128) CPA(3, true, 256) CPA(6, true, 128)
#define TMA(S, T, P, SW, L2, NAME) { auto f = k_tma<S, T, P>; int sm = S * 2 * TILEB + 1024; CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, sm)); \
    CUtensorMap mk = make(K, P, SW, L2), mv = make(V, P, SW, L2); \
    time("tma S=" #S " threads=" #T " panel=" #P " " NAME, [&] { f<<<grid, T, sm>>>(mk, mv, seq, out); }); }
  TMA(3, 128, 64, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, "sw128 l2-128")
  TMA(3, 128, 64, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, "sw128 l2-256")
  TMA(3, 128, 64, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE, "sw128 l2-none")
  TMA(3, 128, 128, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, "nosw l2-256")
  TMA(4, 128, 64, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, "sw128 l2-256")
  TMA(2, 128, 64, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, "sw128 l2-256")
  TMA(6, 128, 64, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, "sw128 l2-256")
  { auto f = k_ldg<256>; time("ldg 256 threads", [&] { f<<<grid, 256>>>(K, V, seq, heads, out); }); }
  { auto f = k_ldg<128>; time("ldg 128 threads", [&] { f<<<grid, 128>>>(K, V, seq, heads, out); }); }
  // ANCHORS.md's copy ceiling: bytes read plus bytes written over the time.
  time("device copy (bytes read + written)", [&] { cudaMemcpyAsync(V, K, bytes, cudaMemcpyDeviceToDevice); });
  return 0;
}
