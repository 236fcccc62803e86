// FlashAttention-2 forward for sm_80 and later (mma.sync path).
//
// One CTA computes a block of kBlockM query rows of one (batch, head) and one slice of the V
// columns. Its warps split the rows: warp w owns kMTiles 16-row MMA tiles. The CTA walks the
// key blocks that its rows can see; K/V tiles stream through a kStages-deep ring of shared
// memory filled by cp.async, so the next tiles load while this one is computed. Per key
// block: S = Q K^T on the tensor cores (fp32 accumulate), the online softmax in registers in
// the exp2 domain (scale folded into one FMA), then O += P V with P taken straight from the
// S accumulators (no trip through shared memory). O is divided by the row sum once, at the
// end, and LSE = ln(sum exp(scale * s)) is written for a recomputing backward pass.
//
// Block masks (block_sparse, pattern) choose whole key tiles: the generator makes block_m
// divide the mask's query block and block_n its key block, so a CTA's rows lie in one query
// block and each key tile in one key block, and a visited tile needs no mask of its own
// (only the sequence end and causal cut inside tiles). Variable-length batches read each
// sequence's start and length from cu_seqlens.
//
// Config (from the generated prelude): Element, kHeadDimQk, kHeadDimV, kDqkPad, kDvSlice,
// kDvSplits, kBlockM, kBlockN, kWarps, kStages, kAlign, kCausal, kWindow, kWindowLeft,
// kWindowRight, kBlockSparse, kPattern, kMaskBlockQ, kMaskBlockK, kPatternWindow,
// kPatternStride, kPatternGlobal, kVarlen.
#pragma once

#include "../arch/sm80.cuh"
#include "../attn/epilogue.cuh"
#include "../attn/key_blocks.cuh"
#include "../attn/mask.cuh"
#include "../attn/softmax.cuh"
#include "../tile/budgets.cuh"
#include "../tile/element.cuh"
#include "../tile/load.cuh"
#include "../tile/warp_products.cuh"
#include "fwd_params.cuh"

namespace fj {

template <class Cfg>
struct Sm80FwdLayout {
  using Element = typename Cfg::Element;
  static constexpr int kThreads = Cfg::kWarps * 32;
  static constexpr int kMTiles = Cfg::kBlockM / (16 * Cfg::kWarps);  // m16 tiles per warp
  static constexpr int kSTiles = Cfg::kBlockN / 8;                   // n8 tiles of S
  static constexpr int kOTiles = Cfg::kDvSlice / 8;                  // n8 tiles of O
  static constexpr int kQkSteps = Cfg::kDqkPad / Element::kMmaK;     // k steps of Q K^T
  static constexpr int kQkStride = budget::conflict_free_stride(Cfg::kDqkPad, Element::kBytes);
  static constexpr int kVStride = budget::conflict_free_stride(Cfg::kDvSlice, Element::kBytes);
  static constexpr int kQElems = Cfg::kBlockM * kQkStride;
  static constexpr int kKElems = Cfg::kBlockN * kQkStride;
  static constexpr int kVElems = Cfg::kBlockN * kVStride;
  static constexpr int kSharedBytes = budget::fwd_sm80_shared_bytes(
      Element::kBytes, Cfg::kDqkPad, Cfg::kDvSlice, Cfg::kBlockM, Cfg::kBlockN, Cfg::kStages);
  static_assert(kSharedBytes == Element::kBytes * (kQElems + Cfg::kStages * (kKElems + kVElems)),
                "the budget holds Q and the K/V ring");

  static_assert(Cfg::kBlockM % (16 * Cfg::kWarps) == 0, "each warp owns whole m16 tiles");
  static_assert(Cfg::kBlockN % 16 == 0, "key blocks are whole k16 steps");
  static_assert(Cfg::kDqkPad % 16 == 0 && Cfg::kDvSlice % 16 == 0, "padded head dims");
  static_assert(Cfg::kStages >= 2, "the pipeline needs two stages");
  static_assert(Element::kBytes == 2 && Element::kMmaK == 16,
                "the fragments below are ldmatrix's b16 and mma.sync's m16n8k16");

  static constexpr bool kBlockMask = KeyTiling<Cfg>::kBlockMask;
};

template <class Cfg>
__device__ __forceinline__ void fwd_sm80(const FwdParams& p) {
  using L = Sm80FwdLayout<Cfg>;
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kStages = Cfg::kStages;
  constexpr int kMT = L::kMTiles, kST = L::kSTiles, kOT = L::kOTiles;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Storage* s_q = reinterpret_cast<Storage*>(smem_raw);
  Storage* s_k = s_q + L::kQElems;
  Storage* s_v = s_k + kStages * L::kKElems;

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  // Blocks are launched last-first: under causal masking the last row blocks see the most
  // keys, and starting them first shortens the tail of the grid.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int head = blockIdx.y;
  const int batch = blockIdx.z / Cfg::kDvSplits;
  const int split = blockIdx.z % Cfg::kDvSplits;
  const int kv_head = head / p.heads_per_kv;
  const int m0 = m_block * kBM;
  const int v_col0 = split * Cfg::kDvSlice;
  const int v_cols = Cfg::kHeadDimV - v_col0;  // valid V columns from v_col0 on
  // This batch's sequence: with cu_seqlens a slice of the packed tensors, whose length may be
  // below the longest one the grid was sized for.
  constexpr bool varlen = Cfg::kVarlen;
  const int q_start = varlen ? p.cu_seqlens_q[batch] : 0;
  const int k_start = varlen ? p.cu_seqlens_k[batch] : 0;
  const int seqlen_q = varlen ? p.cu_seqlens_q[batch + 1] - q_start : p.seqlen_q;
  const int seqlen_k = varlen ? p.cu_seqlens_k[batch + 1] - k_start : p.seqlen_k;
  if (varlen && m0 >= seqlen_q) return;  // the whole CTA: no barrier is left waiting
  // Bottom-right causal alignment: row i sees key j iff j <= i + diag.
  const int diag = seqlen_k - seqlen_q;

  const long long q_row0 = varlen ? q_start * p.q_seq_stride : batch * p.q_batch_stride;
  const long long k_row0 = varlen ? k_start * p.k_seq_stride : batch * p.k_batch_stride;
  const long long v_row0 = varlen ? k_start * p.v_seq_stride : batch * p.v_batch_stride;
  const long long o_row0 = varlen ? q_start * p.o_seq_stride : batch * p.o_batch_stride;
  const Storage* q = static_cast<const Storage*>(p.q) + q_row0 + head * p.q_head_stride +
                 m0 * p.q_seq_stride;
  const Storage* k = static_cast<const Storage*>(p.k) + k_row0 + kv_head * p.k_head_stride;
  const Storage* v = static_cast<const Storage*>(p.v) + v_row0 + kv_head * p.v_head_stride + v_col0;

  // The key tiles to visit (templates/attn/key_blocks.cuh): step s of the main loop loads and
  // computes the tile at step_key0(s); skipped steps (-1) keep their place in the pipeline.
  const KeySteps steps =
      key_steps<Cfg>(p.block_sparse, batch, head, m0, visible_keys<Cfg>(m0, kBM, seqlen_k, diag));
  const int n_blocks = step_count<Cfg>(steps);  // main-loop steps

  float acc_o[kMT][kOT][4];
  float row_max[kMT][2];  // running max of scale*log2(e)*s; -inf until a key is seen
  float row_sum[kMT][2];  // this thread's share of the row sum (reduced over the quad at the end)
  start_rows(acc_o, row_max, row_sum);

  // Step `step` of the main loop works on the key tile at step_key0(step), in ring slot
  // step % kStages.
  auto load_kv = [&](int step) {
    const int key0 = step_key0<Cfg>(steps, step);
    if (L::kBlockMask && key0 < 0) return;  // a skipped step: its commit group stays empty
    load_tile<kBN, Cfg::kDqkPad, L::kQkStride, L::kThreads, Cfg::kAlign>(
        s_k + (step % kStages) * L::kKElems, k + key0 * p.k_seq_stride, p.k_seq_stride,
        seqlen_k - key0, Cfg::kHeadDimQk, tid);
    load_tile<kBN, Cfg::kDvSlice, L::kVStride, L::kThreads, Cfg::kAlign>(
        s_v + (step % kStages) * L::kVElems, v + key0 * p.v_seq_stride, p.v_seq_stride,
        seqlen_k - key0, v_cols, tid);
  };

  if (n_blocks > 0) {
    // Prologue: Q and the first kStages-1 K/V tiles. One commit group per tile, empty groups
    // included, so that "tile j has landed" is always cp.async.wait_group(kStages - 2).
    load_tile<kBM, Cfg::kDqkPad, L::kQkStride, L::kThreads, Cfg::kAlign>(
        s_q, q, p.q_seq_stride, seqlen_q - m0, Cfg::kHeadDimQk, tid);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < n_blocks) load_kv(s);
      cp_async_commit();
    }
  }

  const int warp_row0 = warp * kMT * 16;
  for (int j = 0; j < n_blocks; ++j) {
    cp_async_wait<kStages - 2>();
    // Tile j is visible to all threads, and everyone is done with tile j-1, whose buffer
    // the load below refills.
    __syncthreads();
    if (j + kStages - 1 < n_blocks) load_kv(j + kStages - 1);
    cp_async_commit();
    // Uniform over the CTA, so every thread skips together and meets the next barrier.
    const int key0 = step_key0<Cfg>(steps, j);
    if (L::kBlockMask && key0 < 0) continue;

    const Storage* tile_k = s_k + (j % kStages) * L::kKElems;
    const Storage* tile_v = s_v + (j % kStages) * L::kVElems;

    // ---- S = Q K^T
    float s[kMT][kST][4];
    warp_scores<Element, kMT, kST, L::kQkSteps, L::kQkStride>(s, s_q, warp_row0, tile_k, 0, lane);

    // ---- mask: keys past the sequence end, (causal) keys right of the diagonal, (window)
    // keys outside the band. Only blocks that cross one of those edges pay for it.
    if (block_needs_mask<Cfg>(m0, kBM, key0, kBN, seqlen_k, diag)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        mask_scores<Cfg>(s[mt], m0 + warp_row0 + mt * 16 + lane / 4, key0, seqlen_k, diag, lane);
    }

    // ---- online softmax: new running max, rescale what was accumulated, P = exp2(...)
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      float alpha[2];
      softmax_step(s[mt], row_max[mt], row_sum[mt], p.scale_log2, alpha);
      rescale_rows(acc_o[mt], alpha);
    }

    // ---- O += P V, P from S's registers
    warp_values<Element, kMT, kST, kOT, L::kVStride>(acc_o, s, tile_v, 0, lane);
  }
  cp_async_wait<0>();  // only empty groups can remain; leave none in flight at exit

  // ---- epilogue: O / l to the output type, LSE in natural log.
  Storage* o = static_cast<Storage*>(p.o) + o_row0 + head * p.o_head_stride + m0 * p.o_seq_stride +
           v_col0;
  // LSE is [batch, heads_q, seqlen_q], or with cu_seqlens [heads_q, total_q].
  const long long lse_row0 =
      varlen ? static_cast<long long>(head) * p.cu_seqlens_q[p.batch] + q_start
             : (static_cast<long long>(batch) * p.heads_q + head) * p.seqlen_q;
  float* lse = split == 0 && p.lse != nullptr ? p.lse + lse_row0 + m0 : nullptr;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const int r = warp_row0 + mt * 16;
    store_rows<Cfg>(acc_o[mt], row_max[mt], row_sum[mt], o + r * p.o_seq_stride, p.o_seq_stride,
                    m0 + r, seqlen_q, v_cols, lse ? lse + r : nullptr, lane);
  }
}

}  // namespace fj
