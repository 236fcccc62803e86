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
//
// Decode's tile of 8 query rows runs both products transposed, the rows as mma.sync's n8, so
// no m16 tile is half padding:
//   warp_query_fragments:    Q^T's B fragments of every k16 step, read once and held
//   warp_scores_transposed:  S^T = K Q^T   (kKT m16 tiles of keys by the 8 rows)
//   warp_values_transposed:  O^T += V^T P^T (kVT m16 tiles of V columns by the 8 rows; V read
//                            transposed as the A operand, P^T's B fragments S^T's registers
//                            packed and transposed in registers by movmatrix)
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

template <class Element, int kSteps, int kStride>
__device__ __forceinline__ void warp_query_fragments(u32 (&qf)[kSteps][2],
                                                     const typename Element::Storage* q,
                                                     int lane) {
  constexpr int kBytes = sizeof(typename Element::Storage);
  // B[k][n] of step kk is Q[row n][kk * 16 + k]: ldmatrix's matrices of 8 rows by 8 columns,
  // two a step (columns 0..7, 8..15), lanes 8i..8i+7 giving matrix i's rows.
  const u32 q_at = smem_u32(q + (lane % 8) * kStride + (lane / 8) * 8);
#pragma unroll
  for (int kk = 0; kk + 1 < kSteps; kk += 2) {
    u32 r[4];
    ldmatrix_x4(r, q_at + kk * 16 * kBytes);
    qf[kk][0] = r[0];
    qf[kk][1] = r[1];
    qf[kk + 1][0] = r[2];
    qf[kk + 1][1] = r[3];
  }
  if constexpr (kSteps % 2 != 0) {
    u32 r[2];
    ldmatrix_x2(r, q_at + (kSteps - 1) * 16 * kBytes);
    qf[kSteps - 1][0] = r[0];
    qf[kSteps - 1][1] = r[1];
  }
}

template <class Element, int kKT, int kSteps, int kStride>
__device__ __forceinline__ void warp_scores_transposed(float (&s)[kKT][4],
                                                       const u32 (&qf)[kSteps][2],
                                                       const typename Element::Storage* k,
                                                       int k_row0, int lane) {
  using Mma = WarpMma<Element>;
  constexpr int kBytes = sizeof(typename Element::Storage);
  // One key tile's k16 steps form one chain of dependent products: at 8 steps and more the
  // even and odd steps sum apart (one chain left 6 NOPs between d128's 8 HMMAs and 14 between
  // d256's 16 on sm_90a, two chains 2 and 6, for 6 more registers; at d64 two gained nothing).
  constexpr int kChains = kKT == 1 && kSteps >= 8 ? 2 : 1;
  float acc[kChains][kKT][4];
#pragma unroll
  for (int c = 0; c < kChains; ++c)
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[c][kt][e] = 0.f;
  // A's four matrices: keys 0..7 and 8..15 of columns 0..7, then of columns 8..15.
  const u32 k_at = smem_u32(k + (k_row0 + lane % 16) * kStride + (lane / 16) * 8);
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt) {
      u32 a[4];
      ldmatrix_x4(a, k_at + (kt * 16 * kStride + kk * 16) * kBytes);
      Mma::m16n8k16(acc[kk % kChains][kt], a, qf[kk][0], qf[kk][1]);
    }
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      s[kt][e] = kChains == 1 ? acc[0][kt][e] : acc[0][kt][e] + acc[kChains - 1][kt][e];
}

template <class Element, int kKT, int kVT, int kVStride>
__device__ __forceinline__ void warp_values_transposed(float (&o)[kVT][4],
                                                       const float (&p)[kKT][4],
                                                       const typename Element::Storage* v,
                                                       int v_row0, int lane) {
  using Mma = WarpMma<Element>;
  constexpr int kBytes = sizeof(typename Element::Storage);
  // A[m][k] is V[key k][column m], read transposed: its four matrices are keys 0..7 of
  // columns 0..7 and 8..15, then keys 8..15 of the same.
  const u32 v_at =
      smem_u32(v + (v_row0 + lane % 8 + (lane / 16) * 8) * kVStride + ((lane / 8) % 2) * 8);
#pragma unroll
  for (int kk = 0; kk < kKT; ++kk) {
    // S^T's accumulators of keys 0..7 (and 8..15) packed are an 8x8 matrix of keys by rows
    // as ldmatrix leaves one; transposed, each is the B fragment of those keys.
    const u32 b0 = movmatrix_trans(Element::pack(p[kk][0], p[kk][1]));
    const u32 b1 = movmatrix_trans(Element::pack(p[kk][2], p[kk][3]));
#pragma unroll
    for (int vt = 0; vt < kVT; ++vt) {
      u32 a[4];
      ldmatrix_x4_trans(a, v_at + (kk * 16 * kVStride + vt * 16) * kBytes);
      Mma::m16n8k16(o[vt], a, b0, b1);
    }
  }
}

}  // namespace fj
