// The backward's dK/dV kernel for sm_80 and later (mma.sync path), deterministic by
// construction: one CTA owns a block of kBlockN keys of one (batch, kv head) and computes
// their dK and dV in registers, walking every query head of the GQA group and, per head, the
// query tiles that see those keys, in a fixed order. No other CTA writes those rows, so no
// atomics and no reduction order to vary.
//
// Warp w owns keys w*16 .. w*16+15, so the scores are held transposed: S^T = K Q^T (keys x
// queries), P^T = exp2(scale_log2 * S^T - LSE_log2), dV += P^T dO, dP^T = V dO^T,
// dS^T = P^T * (dP^T - D), dK += dS^T Q; P^T and dS^T are the A operands of the last two
// products straight from the accumulators, as P is in the forward. Q, dO and the rows' LSE
// and D stream through kStages buffers (cp.async); K and V stay in shared memory whole (their
// full head dims: S and dP contract over them). Wide head dims split the output columns over
// kDvSplits CTAs per key block: split s writes dK columns s*kDkSlice.. and dV columns
// s*kDvSlice.., recomputing S and dP.
//
// Config: Element, kHeadDimQk, kHeadDimV, kDqkPad, kDvPad, kDkSlice, kDvSlice, kDvSplits,
// kBlockM (queries a step), kBlockN (keys a CTA, 16 * kWarps), kWarps, kStages, kAlign and the
// mask constants.
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
struct Sm80BwdDkDvLayout {
  using Element = typename Cfg::Element;
  static constexpr int kThreads = Cfg::kWarps * 32;
  static constexpr int kQTiles = Cfg::kBlockM / 8;  // n8 tiles of S^T (query columns)
  static constexpr int kDkTiles = Cfg::kDkSlice / 8;
  static constexpr int kDvTiles = Cfg::kDvSlice / 8;
  static constexpr int kQkStride = budget::conflict_free_stride(Cfg::kDqkPad, Element::kBytes);
  static constexpr int kVStride = budget::conflict_free_stride(Cfg::kDvPad, Element::kBytes);
  static constexpr int kKElems = Cfg::kBlockN * kQkStride;
  static constexpr int kVElems = Cfg::kBlockN * kVStride;
  static constexpr int kQElems = Cfg::kBlockM * kQkStride;
  static constexpr int kDoElems = Cfg::kBlockM * kVStride;
  // Per stage: the Q and dO tiles, then the rows' LSE (log2 domain) and D as floats.
  static constexpr int kSharedBytes = budget::bwd_dkdv_sm80_shared_bytes(
      Element::kBytes, Cfg::kDqkPad, Cfg::kDvPad, Cfg::kBlockM, Cfg::kBlockN, Cfg::kStages);
  static_assert(kSharedBytes ==
                    Element::kBytes * (kKElems + kVElems + Cfg::kStages * (kQElems + kDoElems)) +
                        Cfg::kStages * Cfg::kBlockM * 2 * 4,
                "the budget holds K, V and the query-tile buffers");
  static_assert(budget::bwd_dkdv_sm80_accumulator_registers(Cfg::kDkSlice, Cfg::kDvSlice,
                                                            Cfg::kBlockM) <=
                    budget::kBwdDkDvSm80MaxAccumulatorRegisters,
                "S^T, dP^T, dK and dV within the register budget");

  static_assert(Cfg::kBlockN == 16 * Cfg::kWarps, "each warp owns one m16 tile of keys");
  static_assert(Cfg::kBlockM % 16 == 0, "query tiles are whole k16 steps");
  static_assert(Cfg::kDkSlice % 16 == 0 && Cfg::kDvSlice % 16 == 0, "padded slices");
  static_assert(Cfg::kStages == 1 || Cfg::kStages == 2, "one or two query-tile buffers");
  static_assert(Element::kBytes == 2 && Element::kMmaK == 16,
                "the fragments below are ldmatrix's b16 and mma.sync's m16n8k16");
};

template <class Cfg>
__device__ __forceinline__ void bwd_dkdv_sm80(const BwdParams& p) {
  using L = Sm80BwdDkDvLayout<Cfg>;
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kStages = Cfg::kStages;
  constexpr int kQT = L::kQTiles;
  constexpr float kLog2e = 1.4426950408889634f;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Storage* s_k = reinterpret_cast<Storage*>(smem_raw);
  Storage* s_v = s_k + L::kKElems;
  Storage* s_q = s_v + L::kVElems;
  Storage* s_do = s_q + kStages * L::kQElems;
  float* s_lse = reinterpret_cast<float*>(s_do + kStages * L::kDoElems);  // [stage][kBM]
  float* s_d = s_lse + kStages * kBM;

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int n_block = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int batch = blockIdx.z / Cfg::kDvSplits;
  const int split = blockIdx.z % Cfg::kDvSplits;
  const int n0 = n_block * kBN;
  const int dk_col0 = split * Cfg::kDkSlice, dv_col0 = split * Cfg::kDvSlice;
  const int dk_cols = Cfg::kHeadDimQk - dk_col0;  // valid columns of this split (<= 0: none)
  const int dv_cols = Cfg::kHeadDimV - dv_col0;
  constexpr bool varlen = Cfg::kVarlen;
  const int q_start = varlen ? p.cu_seqlens_q[batch] : 0;
  const int k_start = varlen ? p.cu_seqlens_k[batch] : 0;
  const int seqlen_q = varlen ? p.cu_seqlens_q[batch + 1] - q_start : p.seqlen_q;
  const int seqlen_k = varlen ? p.cu_seqlens_k[batch + 1] - k_start : p.seqlen_k;
  if (n0 >= seqlen_k) return;  // the whole CTA: these keys do not exist
  const int diag = seqlen_k - seqlen_q;

  const long long k_row0 = varlen ? k_start * p.k_seq_stride : batch * p.k_batch_stride;
  const long long v_row0 = varlen ? k_start * p.v_seq_stride : batch * p.v_batch_stride;
  const Storage* k = static_cast<const Storage*>(p.k) + k_row0 + kv_head * p.k_head_stride +
                     n0 * p.k_seq_stride;
  const Storage* v = static_cast<const Storage*>(p.v) + v_row0 + kv_head * p.v_head_stride +
                     n0 * p.v_seq_stride;

  // The steps: every head of the group, and per head the query tiles whose rows see a key
  // of this block (causal and window bands; block masks then test each tile).
  const KeyRange rows = visible_queries<Cfg>(n0, kBN, seqlen_q, diag);
  const int tile0 = rows.begin / kBM;
  const int tiles = rows.end > rows.begin ? (rows.end + kBM - 1) / kBM - tile0 : 0;
  const int n_steps = tiles * p.heads_per_kv;
  constexpr bool kBlockMask = KeyTiling<Cfg>::kBlockMask;
  const int mask_kb = kBlockMask ? n0 / Cfg::kMaskBlockK : 0;

  auto step_head = [&](int step) { return kv_head * p.heads_per_kv + step / tiles; };
  auto step_m0 = [&](int step) { return (tile0 + step % tiles) * kBM; };
  auto step_visible = [&](int step) {
    if constexpr (!kBlockMask)
      return true;
    else  // discarded without a mask, whose kMaskBlockQ is 0
      return block_mask_sees<Cfg>(p.block_sparse, batch, step_head(step),
                                  step_m0(step) / Cfg::kMaskBlockQ, mask_kb, lane);
  };
  // One stage's Q and dO tiles (cp.async) and its rows' LSE and D (plain loads: a row past
  // the sequence end, or one that saw no key (LSE -inf), gets LSE +inf so that P = 0).
  auto load_step = [&](int step) {
    if (!step_visible(step)) return;  // its commit group stays empty
    const int head = step_head(step), m0 = step_m0(step);
    const int stage = step % kStages;
    const long long q_row0 = varlen ? q_start * p.q_seq_stride : batch * p.q_batch_stride;
    const long long do_row0 = varlen ? q_start * p.do_seq_stride : batch * p.do_batch_stride;
    load_tile<kBM, Cfg::kDqkPad, L::kQkStride, L::kThreads, Cfg::kAlign>(
        s_q + stage * L::kQElems,
        static_cast<const Storage*>(p.q) + q_row0 + head * p.q_head_stride + m0 * p.q_seq_stride,
        p.q_seq_stride, seqlen_q - m0, Cfg::kHeadDimQk, tid);
    load_tile<kBM, Cfg::kDvPad, L::kVStride, L::kThreads, Cfg::kAlign>(
        s_do + stage * L::kDoElems,
        static_cast<const Storage*>(p.d_o) + do_row0 + head * p.do_head_stride +
            m0 * p.do_seq_stride,
        p.do_seq_stride, seqlen_q - m0, Cfg::kHeadDimV, tid);
    const long long row_base =
        varlen ? static_cast<long long>(head) * p.cu_seqlens_q[p.batch] + q_start
               : (static_cast<long long>(batch) * p.heads_q + head) * p.seqlen_q;
    for (int r = tid; r < kBM; r += L::kThreads) {
      const bool valid = m0 + r < seqlen_q;
      const float lse = valid ? p.lse[row_base + m0 + r] : neg_inf();
      s_lse[stage * kBM + r] = lse == neg_inf() ? -neg_inf() : lse * kLog2e;
      s_d[stage * kBM + r] = valid ? p.d_rows[row_base + m0 + r] : 0.f;
    }
  };

  // K and V whole, in their own commit group before the first step's.
  load_tile<kBN, Cfg::kDqkPad, L::kQkStride, L::kThreads, Cfg::kAlign>(
      s_k, k, p.k_seq_stride, seqlen_k - n0, Cfg::kHeadDimQk, tid);
  load_tile<kBN, Cfg::kDvPad, L::kVStride, L::kThreads, Cfg::kAlign>(
      s_v, v, p.v_seq_stride, seqlen_k - n0, Cfg::kHeadDimV, tid);
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_steps) load_step(s);
    cp_async_commit();
  }

  // One m16 tile of keys a warp: the warp products' row-tile index is always 0.
  float acc_dk1[1][L::kDkTiles][4], acc_dv1[1][L::kDvTiles][4];
  auto& acc_dk = acc_dk1[0];
  auto& acc_dv = acc_dv1[0];
#pragma unroll
  for (int t = 0; t < L::kDkTiles; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[t][e] = 0.f;
#pragma unroll
  for (int t = 0; t < L::kDvTiles; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dv[t][e] = 0.f;

  const int key_row = warp * 16;  // this warp's keys within the block
  for (int j = 0; j < n_steps; ++j) {
    if constexpr (kStages == 1) {
      __syncthreads();  // everyone is done with step j-1's buffer
      load_step(j);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    } else {
      cp_async_wait<0>();
      // Step j's tiles are visible to all threads, and everyone is done with step j-1,
      // whose buffer the load below refills.
      __syncthreads();
      if (j + 1 < n_steps) load_step(j + 1);
      cp_async_commit();
    }
    if (!step_visible(j)) continue;  // uniform over the CTA
    const int stage = j % kStages;
    const int m0 = step_m0(j);
    const Storage* tile_q = s_q + stage * L::kQElems;
    const Storage* tile_do = s_do + stage * L::kDoElems;
    const float* lse_log2 = s_lse + stage * kBM;
    const float* d_rows = s_d + stage * kBM;

    // ---- S^T = K Q^T for this warp's 16 keys and the tile's kBM queries
    float s1[1][kQT][4];
    auto& s = s1[0];
    warp_scores<Element, 1, kQT, Cfg::kDqkPad / 16, L::kQkStride>(s1, s_k, key_row, tile_q, 0,
                                                                  lane);
    if (block_needs_mask<Cfg>(m0, kBM, n0, kBN, seqlen_k, diag))
      mask_scores_transposed<Cfg>(s, n0 + key_row + lane / 4, m0, diag, lane);

    // ---- P^T = exp2(scale_log2 * S^T - LSE_log2) (column c is query row m0 + c)
#pragma unroll
    for (int t = 0; t < kQT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = t * 8 + (lane % 4) * 2 + e % 2;
        s[t][e] = exp2_approx(fmaf(s[t][e], p.scale_log2, -lse_log2[c]));
      }

    // ---- dV += P^T dO (this split's dV columns)
    if (dv_cols > 0)
      warp_values<Element, 1, kQT, L::kDvTiles, L::kVStride>(acc_dv1, s1, tile_do + dv_col0, 0,
                                                             lane);
    if (dk_cols <= 0) continue;

    // ---- dP^T = V dO^T, then dS^T = P^T * (dP^T - D) in place
    float dp1[1][kQT][4];
    auto& dp = dp1[0];
    warp_scores<Element, 1, kQT, Cfg::kDvPad / 16, L::kVStride>(dp1, s_v, key_row, tile_do, 0,
                                                                lane);
#pragma unroll
    for (int t = 0; t < kQT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = t * 8 + (lane % 4) * 2 + e % 2;
        dp[t][e] = s[t][e] * (dp[t][e] - d_rows[c]);
      }

    // ---- dK += dS^T Q (this split's dK columns; the scale is applied once, at the end)
    warp_values<Element, 1, kQT, L::kDkTiles, L::kQkStride>(acc_dk1, dp1, tile_q + dk_col0, 0,
                                                            lane);
  }
  cp_async_wait<0>();  // only empty groups can remain; leave none in flight at exit

  // ---- epilogue: every key row of the block is written, zeros for keys no query sees.
  const long long dk_row0 = varlen ? k_start * p.dk_seq_stride : batch * p.dk_batch_stride;
  const long long dv_row0 = varlen ? k_start * p.dv_seq_stride : batch * p.dv_batch_stride;
  const int key = n0 + key_row;
  if (dk_cols > 0) {
    Storage* dk = static_cast<Storage*>(p.d_k) + dk_row0 + kv_head * p.dk_head_stride +
                  key * p.dk_seq_stride + dk_col0;
    store_scaled_rows<Cfg>(acc_dk, p.softmax_scale, dk, p.dk_seq_stride, key, seqlen_k, dk_cols,
                           lane);
  }
  if (dv_cols > 0) {
    Storage* dv = static_cast<Storage*>(p.d_v) + dv_row0 + kv_head * p.dv_head_stride +
                  key * p.dv_seq_stride + dv_col0;
    store_scaled_rows<Cfg>(acc_dv, 1.f, dv, p.dv_seq_stride, key, seqlen_k, dv_cols, lane);
  }
}

}  // namespace fj
