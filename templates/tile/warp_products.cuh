// One warp's share of the two products of the mma.sync attention kernels (the sm80 forward
// and decode), on tiles in shared memory:
//   warp_scores:  S = Q K^T    (kMT m16 tiles of Q rows by kST n8 tiles of keys, over kSteps
//                               k16 steps of the head dim; Q's and K's rows both k-contiguous,
//                               kStride elements apart)
//   warp_values:  O += P V     (P is S's registers: the accumulators of two adjacent n8 tiles
//                               are exactly the A fragment of one k16 step, so P never leaves
//                               the registers; V's rows are keys, read transposed)
// A kernel places its warp with the first Q row, key row and V row it passes. The sm80
// backward runs its products through the same two: S^T = K Q^T and dP^T = V dO^T as scores
// (keys in the A rows), dV += P^T dO and dK += dS^T Q as values (queries the k dimension);
// its dQ kernel S = Q K^T, dP = dO V^T and dQ += dS K.
#pragma once

#include "../arch/sm80.cuh"
#include "element.cuh"
#include "mma.cuh"

namespace fj {

template <class Element, int kMT, int kST, int kSteps, int kStride>
__device__ __forceinline__ void warp_scores(float (&s)[kMT][kST][4],
                                            const typename Element::Storage* q, int q_row0,
                                            const typename Element::Storage* k, int k_row0,
                                            int lane) {
  using Mma = WarpMma<Element>;
  constexpr int kBytes = sizeof(typename Element::Storage);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kST; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
  // Each lane's first ldmatrix address in Q and in K: every later one lies a constant number
  // of bytes on, which ptxas folds into the instruction's offset (no address arithmetic).
  const u32 q_at = smem_u32(q + (q_row0 + lane % 16) * kStride + (lane / 16) * 8);
  const u32 k_at =
      smem_u32(k + (k_row0 + lane % 8 + (lane / 16) * 8) * kStride + ((lane / 8) % 2) * 8);
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    u32 a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
      ldmatrix_x4(a[mt], q_at + (mt * 16 * kStride + kk * 16) * kBytes);
#pragma unroll
    for (int np = 0; np < kST / 2; ++np) {
      u32 b[4];  // b[0..1]: keys np*16+0..7, b[2..3]: keys np*16+8..15
      ldmatrix_x4(b, k_at + (np * 16 * kStride + kk * 16) * kBytes);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        Mma::m16n8k16(s[mt][2 * np], a[mt], b[0], b[1]);
        Mma::m16n8k16(s[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

template <class Element, int kMT, int kST, int kOT, int kVStride>
__device__ __forceinline__ void warp_values(float (&o)[kMT][kOT][4], const float (&p)[kMT][kST][4],
                                            const typename Element::Storage* v, int v_row0,
                                            int lane) {
  using Mma = WarpMma<Element>;
  constexpr int kBytes = sizeof(typename Element::Storage);
  // As in warp_scores: one address a lane, the rest constant offsets from it.
  const u32 v_at =
      smem_u32(v + (v_row0 + lane % 8 + ((lane / 8) % 2) * 8) * kVStride + (lane / 16) * 8);
#pragma unroll
  for (int kk = 0; kk < kST / 2; ++kk) {
    u32 a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      a[mt][0] = Element::pack(p[mt][2 * kk][0], p[mt][2 * kk][1]);
      a[mt][1] = Element::pack(p[mt][2 * kk][2], p[mt][2 * kk][3]);
      a[mt][2] = Element::pack(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
      a[mt][3] = Element::pack(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int op = 0; op < kOT / 2; ++op) {
      u32 b[4];  // b[0..1]: V columns op*16+0..7, b[2..3]: columns op*16+8..15
      ldmatrix_x4_trans(b, v_at + (kk * 16 * kVStride + op * 16) * kBytes);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        Mma::m16n8k16(o[mt][2 * op], a[mt], b[0], b[1]);
        Mma::m16n8k16(o[mt][2 * op + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

}  // namespace fj
