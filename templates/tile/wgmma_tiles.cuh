// Products of whole tiles with wgmma over swizzled panels (the layout TMA writes), for 16-bit
// elements: rows of kRow bytes (128 by default; 64 or 32 where a head dim's padded rows are
// no multiple of 128 bytes, so that no panel is mostly padding), kRow / 2 columns a panel; a
// k16 step is 32 bytes along a K-major row, or 16 rows (16 * kRow bytes) down an MN-major
// panel; panels lie `panel_bytes` apart. The backward's sm90 kernels use them.
#pragma once

#include "../arch/sm90.cuh"
#include "budgets.cuh"

namespace fj {

// D = A B^T over kSteps k16 steps, A's 64 rows and B's N rows both K-major (D's first step
// overwrites, the others accumulate).
template <int N, int kSteps, int kRow = 128>
__device__ __forceinline__ void wgmma_ss_k_major(float (&d)[N / 8][4], u32 a, int a_panel_bytes,
                                                 u32 b, int b_panel_bytes) {
  constexpr int kStepBytes = 32, kStepsPerPanel = kRow / kStepBytes;
#pragma unroll
  for (int t = 0; t < kSteps; ++t) {
    const int panel = t / kStepsPerPanel;
    const u32 in_panel = (t % kStepsPerPanel) * kStepBytes;
    Wgmma<N>::ss(d, smem_desc_swizzled<kRow>(a + panel * a_panel_bytes + in_panel, 16),
                 smem_desc_swizzled<kRow>(b + panel * b_panel_bytes + in_panel, 16), t > 0);
  }
}

// D += X B over kSteps k16 steps: X from registers (pack_k16_steps), B's rows the K dimension
// and its N columns MN-major from panel address b on. N past wgmma's 256 runs as 256 columns
// and then the rest.
template <int N, int kSteps, int kRow = 128>
__device__ __forceinline__ void wgmma_rs_mn_major(float (&d)[N / 8][4], const u32 (&x)[kSteps][4],
                                                  u32 b, int b_panel_bytes) {
  if constexpr (N > 256) {
    constexpr int kPanels256 = 256 * 2 / kRow;  // the panels of 256 columns
    wgmma_rs_mn_major<256, kSteps, kRow>(reinterpret_cast<float(&)[32][4]>(d[0]), x, b,
                                         b_panel_bytes);
    wgmma_rs_mn_major<N - 256, kSteps, kRow>(reinterpret_cast<float(&)[(N - 256) / 8][4]>(d[32]),
                                             x, b + kPanels256 * b_panel_bytes, b_panel_bytes);
  } else {
#pragma unroll
    for (int t = 0; t < kSteps; ++t)
      Wgmma<N>::rs(d, x[t], smem_desc_swizzled<kRow>(b + t * 16 * kRow, b_panel_bytes), true);
  }
}

// wgmma_rs_mn_major on the n8 tiles of D below column kValid (budget::live_cols); the rest of
// D is left as it was (the caller's zeros), so padding columns cost no tensor cycles.
template <int N, int kValid, int kSteps, int kRow = 128>
__device__ __forceinline__ void wgmma_rs_mn_major_live(float (&d)[N / 8][4],
                                                       const u32 (&x)[kSteps][4], u32 b,
                                                       int b_panel_bytes) {
  constexpr int kLive = budget::live_cols(N, kValid);
  wgmma_rs_mn_major<kLive, kSteps, kRow>(reinterpret_cast<float(&)[kLive / 8][4]>(d[0]), x, b,
                                         b_panel_bytes);
}

// D = A B over kSteps k16 steps, A's 64 rows and B's N columns both MN-major: their K rows
// run down the panels, 16 to a step (D's first step overwrites, the others accumulate); A's
// rows are kRowA bytes, B's kRowB.
template <int N, int kSteps, int kRowA = 128, int kRowB = 128>
__device__ __forceinline__ void wgmma_ss_mn_major(float (&d)[N / 8][4], u32 a, int a_panel_bytes,
                                                  u32 b, int b_panel_bytes) {
#pragma unroll
  for (int t = 0; t < kSteps; ++t)
    Wgmma<N>::ss_mn(d, smem_desc_swizzled<kRowA>(a + t * 16 * kRowA, a_panel_bytes),
                    smem_desc_swizzled<kRowB>(b + t * 16 * kRowB, b_panel_bytes), t > 0);
}

// wgmma_ss_mn_major on the n8 tiles of D below column kValid (budget::live_cols), the rest of
// D zeroed (the product's first step overwrites D).
template <int N, int kValid, int kSteps, int kRowA = 128, int kRowB = 128>
__device__ __forceinline__ void wgmma_ss_mn_major_live(float (&d)[N / 8][4], u32 a,
                                                       int a_panel_bytes, u32 b,
                                                       int b_panel_bytes) {
  constexpr int kLive = budget::live_cols(N, kValid);
#pragma unroll
  for (int t = kLive / 8; t < N / 8; ++t) d[t][0] = d[t][1] = d[t][2] = d[t][3] = 0.f;
  wgmma_ss_mn_major<kLive, kSteps, kRowA, kRowB>(reinterpret_cast<float(&)[kLive / 8][4]>(d[0]),
                                                 a, a_panel_bytes, b, b_panel_bytes);
}

// D += A B over kSteps k16 steps, A's 64 rows MN-major (K rows down its panel, 16 to a step,
// as in wgmma_ss_mn_major) and B's N rows K-major in one panel of kRowB-byte rows (a step
// 32 bytes along them, as in wgmma_ss_k_major): the swapped dK/dV consumers' transposed
// products, dV^T += dO^T P and dK^T += Q^T dS.
template <int N, int kSteps, int kRowA = 128, int kRowB = 128>
__device__ __forceinline__ void wgmma_ss_a_mn_major(float (&d)[N / 8][4], u32 a, int a_panel_bytes,
                                                    u32 b) {
  constexpr int kStepBytes = 32;
  static_assert(kSteps * kStepBytes <= kRowB, "B's K steps within one panel row");
#pragma unroll
  for (int t = 0; t < kSteps; ++t)
    Wgmma<N>::ss_a_mn(d, smem_desc_swizzled<kRowA>(a + t * 16 * kRowA, a_panel_bytes),
                      smem_desc_swizzled<kRowB>(b + t * kStepBytes, 16), true);
}

// An accumulator of kTiles n8 tiles, zeroed.
template <int kTiles>
__device__ __forceinline__ void zero_tiles(float (&d)[kTiles][4]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) d[t][0] = d[t][1] = d[t][2] = d[t][3] = 0.f;
}

// Two n8 tiles of an accumulator as one k16 step of wgmma's RS A operand.
template <class Element>
__device__ __forceinline__ void pack_k16_step(u32 (&x)[4], const float (&a)[4],
                                              const float (&b)[4]) {
  x[0] = Element::pack(a[0], a[1]);
  x[1] = Element::pack(a[2], a[3]);
  x[2] = Element::pack(b[0], b[1]);
  x[3] = Element::pack(b[2], b[3]);
}

// An accumulator of kTiles n8 tiles as wgmma's RS A operand: k16 step t is tiles 2t and 2t+1.
template <class Element, int kTiles>
__device__ __forceinline__ void pack_k16_steps(u32 (&x)[kTiles / 2][4], const float (&s)[kTiles][4]) {
#pragma unroll
  for (int t = 0; t < kTiles / 2; ++t) pack_k16_step<Element>(x[t], s[2 * t], s[2 * t + 1]);
}

}  // namespace fj
