// The backward's dQ kernel for sm_80 and later (mma.sync path), deterministic by
// construction: one CTA owns kBlockM query rows of one (batch, head) and walks the key tiles
// its rows see in the forward's order (attn/key_blocks.cuh), accumulating dQ in registers;
// nothing is added atomically, so every run sums in the same order.
//
// Per key tile, as the forward with the roles of its products changed: S = Q K^T,
// P = exp2(scale_log2 * S - LSE_log2) from the forward's LSE (no running max: P is final),
// dP = dO V^T, dS = P * (dP - D), dQ += dS K, with dS the A operand straight from the
// accumulators. K and V tiles stream through a kStages-deep cp.async ring; Q and dO stay.
// Wide qk head dims split dQ's columns over kDvSplits CTAs per row block (each recomputes S
// and dP).
//
// Config: Element, kHeadDimQk, kHeadDimV, kDqkPad, kDvPad, kDkSlice (dQ columns a CTA),
// kDvSplits, kBlockM (16 * kWarps), kBlockN, kWarps, kStages, kAlign, the mask constants.
#pragma once

#include "../arch/sm80.cuh"
#include "../attn/epilogue.cuh"
#include "../attn/key_blocks.cuh"
#include "../attn/mask.cuh"
#include "../tile/budgets.cuh"
#include "../tile/element.cuh"
#include "../tile/load.cuh"
#include "../tile/warp_products.cuh"
#include "bwd_params.cuh"

namespace fj {

template <class Cfg>
struct Sm80BwdDqLayout {
  using Element = typename Cfg::Element;
  static constexpr int kThreads = Cfg::kWarps * 32;
  static constexpr int kSTiles = Cfg::kBlockN / 8;  // n8 tiles of S (key columns)
  static constexpr int kDqTiles = Cfg::kDkSlice / 8;
  static constexpr int kQkStride = budget::conflict_free_stride(Cfg::kDqkPad, Element::kBytes);
  static constexpr int kVStride = budget::conflict_free_stride(Cfg::kDvPad, Element::kBytes);
  static constexpr int kQElems = Cfg::kBlockM * kQkStride;
  static constexpr int kDoElems = Cfg::kBlockM * kVStride;
  static constexpr int kKElems = Cfg::kBlockN * kQkStride;
  static constexpr int kVElems = Cfg::kBlockN * kVStride;
  static constexpr int kSharedBytes = budget::bwd_dq_sm80_shared_bytes(
      Element::kBytes, Cfg::kDqkPad, Cfg::kDvPad, Cfg::kBlockM, Cfg::kBlockN, Cfg::kStages);
  static_assert(kSharedBytes ==
                    Element::kBytes * (kQElems + kDoElems + Cfg::kStages * (kKElems + kVElems)),
                "the budget holds Q, dO and the K/V ring");
  static_assert(budget::bwd_dq_sm80_accumulator_registers(Cfg::kDkSlice, Cfg::kBlockN) <=
                    budget::kBwdDqSm80MaxAccumulatorRegisters,
                "S, dP and dQ within the register budget");

  static_assert(Cfg::kBlockM == 16 * Cfg::kWarps, "each warp owns one m16 tile of rows");
  static_assert(Cfg::kBlockN % 16 == 0, "key tiles are whole k16 steps");
  static_assert(Cfg::kDkSlice % 16 == 0, "padded slices");
  static_assert(Cfg::kStages >= 2, "the pipeline needs two stages");
  static_assert(Element::kBytes == 2 && Element::kMmaK == 16,
                "the fragments below are ldmatrix's b16 and mma.sync's m16n8k16");
};

template <class Cfg>
__device__ __forceinline__ void bwd_dq_sm80(const BwdParams& p) {
  using L = Sm80BwdDqLayout<Cfg>;
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kStages = Cfg::kStages;
  constexpr int kST = L::kSTiles;
  constexpr float kLog2e = 1.4426950408889634f;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Storage* s_q = reinterpret_cast<Storage*>(smem_raw);
  Storage* s_do = s_q + L::kQElems;
  Storage* s_k = s_do + L::kDoElems;
  Storage* s_v = s_k + kStages * L::kKElems;

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  // Last row blocks first, as the forward: under causal masking they see the most keys.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int head = blockIdx.y;
  const int batch = blockIdx.z / Cfg::kDvSplits;
  const int split = blockIdx.z % Cfg::kDvSplits;
  const int kv_head = head / p.heads_per_kv;
  const int m0 = m_block * kBM;
  const int dq_col0 = split * Cfg::kDkSlice;
  const int dq_cols = Cfg::kHeadDimQk - dq_col0;
  constexpr bool varlen = Cfg::kVarlen;
  const int q_start = varlen ? p.cu_seqlens_q[batch] : 0;
  const int k_start = varlen ? p.cu_seqlens_k[batch] : 0;
  const int seqlen_q = varlen ? p.cu_seqlens_q[batch + 1] - q_start : p.seqlen_q;
  const int seqlen_k = varlen ? p.cu_seqlens_k[batch + 1] - k_start : p.seqlen_k;
  if (m0 >= seqlen_q) return;  // the whole CTA
  const int diag = seqlen_k - seqlen_q;

  const long long q_row0 = varlen ? q_start * p.q_seq_stride : batch * p.q_batch_stride;
  const long long do_row0 = varlen ? q_start * p.do_seq_stride : batch * p.do_batch_stride;
  const long long k_row0 = varlen ? k_start * p.k_seq_stride : batch * p.k_batch_stride;
  const long long v_row0 = varlen ? k_start * p.v_seq_stride : batch * p.v_batch_stride;
  const Storage* q = static_cast<const Storage*>(p.q) + q_row0 + head * p.q_head_stride +
                     m0 * p.q_seq_stride;
  const Storage* d_o = static_cast<const Storage*>(p.d_o) + do_row0 + head * p.do_head_stride +
                       m0 * p.do_seq_stride;
  const Storage* k = static_cast<const Storage*>(p.k) + k_row0 + kv_head * p.k_head_stride;
  const Storage* v = static_cast<const Storage*>(p.v) + v_row0 + kv_head * p.v_head_stride;

  const KeySteps steps =
      key_steps<Cfg>(p.block_sparse, batch, head, m0, visible_keys<Cfg>(m0, kBM, seqlen_k, diag));
  const int n_blocks = step_count<Cfg>(steps);

  // This thread's two rows: LSE in the log2 domain (+inf for a row past the end or one that
  // saw no key, so that its P is 0) and D.
  const long long row_base =
      varlen ? static_cast<long long>(head) * p.cu_seqlens_q[p.batch] + q_start
             : (static_cast<long long>(batch) * p.heads_q + head) * p.seqlen_q;
  const int warp_row0 = warp * 16;
  float lse_log2[2], d_row[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = m0 + warp_row0 + lane / 4 + half * 8;
    const float lse = r < seqlen_q ? p.lse[row_base + r] : neg_inf();
    lse_log2[half] = lse == neg_inf() ? -neg_inf() : lse * kLog2e;
    d_row[half] = r < seqlen_q ? p.d_rows[row_base + r] : 0.f;
  }

  // One m16 tile of query rows a warp: the warp products' row-tile index is always 0.
  float acc_dq1[1][L::kDqTiles][4];
  auto& acc_dq = acc_dq1[0];
#pragma unroll
  for (int t = 0; t < L::kDqTiles; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dq[t][e] = 0.f;

  auto load_kv = [&](int step) {
    const int key0 = step_key0<Cfg>(steps, step);
    if (KeyTiling<Cfg>::kBlockMask && key0 < 0) return;  // a skipped step: an empty group
    load_tile<kBN, Cfg::kDqkPad, L::kQkStride, L::kThreads, Cfg::kAlign>(
        s_k + (step % kStages) * L::kKElems, k + key0 * p.k_seq_stride, p.k_seq_stride,
        seqlen_k - key0, Cfg::kHeadDimQk, tid);
    load_tile<kBN, Cfg::kDvPad, L::kVStride, L::kThreads, Cfg::kAlign>(
        s_v + (step % kStages) * L::kVElems, v + key0 * p.v_seq_stride, p.v_seq_stride,
        seqlen_k - key0, Cfg::kHeadDimV, tid);
  };

  if (n_blocks > 0) {
    load_tile<kBM, Cfg::kDqkPad, L::kQkStride, L::kThreads, Cfg::kAlign>(
        s_q, q, p.q_seq_stride, seqlen_q - m0, Cfg::kHeadDimQk, tid);
    load_tile<kBM, Cfg::kDvPad, L::kVStride, L::kThreads, Cfg::kAlign>(
        s_do, d_o, p.do_seq_stride, seqlen_q - m0, Cfg::kHeadDimV, tid);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < n_blocks) load_kv(s);
      cp_async_commit();
    }
  }

  for (int j = 0; j < n_blocks; ++j) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (j + kStages - 1 < n_blocks) load_kv(j + kStages - 1);
    cp_async_commit();
    const int key0 = step_key0<Cfg>(steps, j);
    if (KeyTiling<Cfg>::kBlockMask && key0 < 0) continue;
    const Storage* tile_k = s_k + (j % kStages) * L::kKElems;
    const Storage* tile_v = s_v + (j % kStages) * L::kVElems;

    // ---- S = Q K^T and dP = dO V^T, both kBM x kBN
    float s1[1][kST][4], dp1[1][kST][4];
    auto& s = s1[0];
    auto& dp = dp1[0];
    warp_scores<Element, 1, kST, Cfg::kDqkPad / 16, L::kQkStride>(s1, s_q, warp_row0, tile_k, 0,
                                                                  lane);
    if (block_needs_mask<Cfg>(m0, kBM, key0, kBN, seqlen_k, diag))
      mask_scores<Cfg>(s, m0 + warp_row0 + lane / 4, key0, seqlen_k, diag, lane);
#pragma unroll
    for (int t = 0; t < kST; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[t][e] = exp2_approx(fmaf(s[t][e], p.scale_log2, -lse_log2[e / 2]));

    warp_scores<Element, 1, kST, Cfg::kDvPad / 16, L::kVStride>(dp1, s_do, warp_row0, tile_v, 0,
                                                                lane);
    // ---- dS = P * (dP - D)
#pragma unroll
    for (int t = 0; t < kST; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[t][e] = s[t][e] * (dp[t][e] - d_row[e / 2]);

    // ---- dQ += dS K (this split's columns; the scale is applied once, at the end)
    warp_values<Element, 1, kST, L::kDqTiles, L::kQkStride>(acc_dq1, dp1, tile_k + dq_col0, 0,
                                                            lane);
  }
  cp_async_wait<0>();

  const long long dq_row0 = varlen ? q_start * p.dq_seq_stride : batch * p.dq_batch_stride;
  Storage* dq = static_cast<Storage*>(p.d_q) + dq_row0 + head * p.dq_head_stride +
                (m0 + warp_row0) * p.dq_seq_stride + dq_col0;
  store_scaled_rows<Cfg>(acc_dq, p.softmax_scale, dq, p.dq_seq_stride, m0 + warp_row0, seqlen_q,
                         dq_cols, lane);
}

}  // namespace fj
