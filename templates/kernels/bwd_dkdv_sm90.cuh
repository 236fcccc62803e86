// The backward's dK/dV kernel for sm_90a: warp-specialised, TMA + mbarrier + wgmma, and
// deterministic by construction like the sm80 kernel (one CTA owns its keys' dK and dV, walks
// the query heads of the GQA group and their query tiles in a fixed order, no atomics).
//
// A CTA is 128 keys of one (batch, kv head) and three warp groups:
//   - warp group 0, the producer, gives most of its registers away; its first warp loads K and
//     V once (TMA, the kv_full barrier), then per step the Q and dO tiles of kBlockM query rows
//     into a kStages-deep ring (one lane issues TMA; every lane loads its rows' LSE and D
//     before the slot frees and writes them into it, the LSE in the log2 domain, once the
//     copies are issued), each slot guarded by a "full" and an "empty" mbarrier (swapped
//     consumers at one slot: Q in two, dO in one with its own pair).
//   - warp groups 1 and 2, the consumers, own 64 keys each, so they hold the scores transposed
//     (wgmma M = keys, N = the tile's query rows). Per step:
//       S^T = K Q^T and dP^T = V dO^T   (wgmma SS, both K-major in swizzled panels: rows of
//                                        128 bytes, or of 64 or 32 where only they leave room
//                                        for the tiles, Cfg::kPanelRowBytes)
//       P^T = exp2(scale_log2 S^T - LSE_log2), dV += P^T dO   (RS: P^T from the S registers)
//       dS^T = P^T (dP^T - D),             dK += dS^T Q      (RS; Q and dO read MN-major)
//     dP^T is in flight while P^T is computed, and dV's product while dS^T is (the dQ
//     variants: after, see below).
// Wide heads split the output columns over kDvSplits CTAs per key block, as in the sm80
// kernel: split s accumulates dK columns s*kDkSlice.. and dV columns s*kDvSlice.. (64-column
// panels), recomputing S^T and dP^T over the whole head dims.
//
// The dQ-accumulating variant (bwd_dkdv_dq_sm90, not deterministic) also computes dQ, so that
// no separate dQ kernel recomputes S and dP: 5 products a step instead of 7 over both kernels.
// Both consumers write their dS^T to shared memory (a 128-key x kBlockM-query tile, two
// buffers), meet at a named barrier, and each computes its part of dQ = dS K (wgmma SS, both
// MN-major): at 64 query rows a step its share of the split's dQ columns, at 128 (head dims
// up to 80, FlashAttention-3's tile at d64) 64 of the rows and every column. It stages that
// tile in shared memory in the order its registers hold it, and one thread adds the whole
// tile to its block of the fp32 dq_accum with one bulk reduction: reductions from registers
// (red.global) took as long again as the products, and one bulk reduction a row took longer
// still. bwd_dq_convert reads the blocks back in that order and scales them into dQ. A step
// runs in FlashAttention-3's order, so that a product is in flight through each wait: dS^T is
// stored before dV's product is issued, which runs under the dS^T barrier; then dQ's product,
// dK's once dV's is done, and dQ's tile is staged while dK's runs (d128 at 16k tokens: 9.9 →
// 8.9 ms on the H200, bench/NOTES.md entry 36).
//
// Where one consumer cannot hold its keys' dK and dV beside S^T and dP^T (qk + v past about
// 336 columns), the kernel takes 64 keys a CTA and pairs the consumers on them instead of
// splitting the columns over CTAs that each recompute S^T and dP^T (and dQ's kernel, both):
// the first computes S^T, P^T and dV, and hands P^T to the second through shared memory; the
// second computes dP^T, dS^T and dK (consume_paired). In the dQ variants each then computes
// its share of dQ as above: five products a step and no recomputation, FlashAttention-3's
// tiles at these head dims (64 x 80 or 96 there, its warp groups split dK's and dV's
// columns). The dK/dV-only kernel pairs them too, where the dQ variants' tiles do not fit
// two ring slots or the spec is deterministic: four products a step, then the dQ kernel's
// three.
//
// Where the 128-key consumers cannot hold dK and dV and the heads are whole (192/128), the dQ
// variant may instead take 96 keys a CTA, 48 a consumer, and swap its products so that the
// keys are wgmma's N (kernels/bwd_dkdv_swapped_sm90.cuh): FlashAttention-3's tiles there.
//
// The ordered variant (bwd_dkdv_dq_ordered_sm90, deterministic) makes those adds in a fixed
// order of key blocks, so that every run sums each block alike (FlashAttention-3's
// deterministic backward). The consumers stage their tiles as above, leave the block's
// address, its counter in dq_turns and their turn in a mailbox and arrive at an mbarrier;
// the dQ writer (the first lane of the producer's second warp) waits until the counter
// reaches the turn, adds the tile, frees the stage once read, and releases the counter to the
// next key block once the add has landed. Under the full band the order is by key block, up;
// under causal and window bands, down from the last key block that sees the tile: with the
// blocks walking their query tiles up, that is the order in which they reach it. The grid's x
// index runs the same way (key blocks counted down under bands), so a CTA only ever waits for
// CTAs launched before it.
//
// Config: Element, kHeadDimQk, kHeadDimV, kDqkPad, kDvPad, kDkSlice, kDvSlice, kDvSplits,
// kBlockM (queries a step), kBlockN (keys a CTA: 128, 64 paired or 96 swapped), kStages,
// kVarlen and the causal and window constants (block masks take the sm80 kernel).
#pragma once

#include "bwd_dkdv_paired_sm90.cuh"
#include "bwd_dkdv_sm90_dq.cuh"
#include "bwd_dkdv_sm90_layout.cuh"
#include "bwd_dkdv_swapped_sm90.cuh"

namespace fj {
namespace sm90_bwd {

// One lane's TMA copies of a tile's kPanels panels (kPanelBytes apart from `tile` on, the
// layout's kPanelCols columns each) of rows from `row` of `head`, completing on mbarrier `full`.
template <class L, int kPanels, int kPanelBytes>
__device__ __forceinline__ void load_panels(u32 tile, const TmaDesc* map, int row, int head,
                                            int batch, u32 full) {
#pragma unroll 1
  for (int panel = 0; panel < kPanels; ++panel)
    tma_load_4d(tile + panel * kPanelBytes, map, panel * L::kPanelCols, row, head, batch, full);
}

// The producer's first warp.
template <class Cfg, DqAdds kDq>
__device__ __forceinline__ void produce(const Smem<Cfg, kDq>& sm, const BwdParams& p,
                                        const KeyBlock<Cfg>& kb, const TmaDesc* tm_q,
                                        const TmaDesc* tm_k, const TmaDesc* tm_v,
                                        const TmaDesc* tm_do) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  const Sequence& seq = kb.seq;
  const int lane = threadIdx.x % 32;
  if (lane == 0) {
    mbar_arrive_expect_tx(sm.kv_full(), L::kKBytes + L::kVBytes);
    load_panels<L, L::kQkPanels, L::kKPanelBytes>(sm.k(), tm_k, seq.k_start + kb.n0, kb.kv_head,
                                                  seq.tma_batch, sm.kv_full());
    load_panels<L, L::kVPanels, L::kKPanelBytes>(sm.v(), tm_v, seq.k_start + kb.n0, kb.kv_head,
                                                 seq.tma_batch, sm.kv_full());
  }
  // A step's Q tile into Q's ring slot `slot`, and its dO tile into dO's `do_slot`.
  const auto load_q = [&](int slot, int m0, int head, u32 full) {
    load_panels<L, L::kQPanels, L::kQPanelBytes>(sm.q(slot), tm_q, seq.q_start + m0, head,
                                                 seq.tma_batch, full);
  };
  const auto load_do = [&](int do_slot, int m0, int head, u32 full) {
    load_panels<L, L::kDoPanels, L::kQPanelBytes>(sm.d_o(do_slot), tm_do, seq.q_start + m0, head,
                                                  seq.tma_batch, full);
  };
  // A step's rows a lane: lane, lane + 32, ... below kBlockM. Their LSEs are stored in the
  // log2 domain, converted only then: used before the slot's wait, the loads would hold back
  // the slot's copies whenever the slot is already free.
  constexpr int kLaneRows = (Cfg::kBlockM + 31) / 32;
  const auto store_rows = [&](u32 at, const float (&values)[kLaneRows], bool log2_domain) {
#pragma unroll
    for (int i = 0; i < kLaneRows; ++i)
      if (lane + 32 * i < Cfg::kBlockM)
        st_shared_u32(at + 4 * (lane + 32 * i),
                      __float_as_int(log2_domain ? lse_log2(values[i]) : values[i]));
  };
  // kb.head(p, j) and kb.m0(j), counted along: the divisions took registers the producer's
  // 24 do not have beside the dQ writer's.
  int head = kb.kv_head * p.heads_per_kv, m0 = kb.tile0 * Cfg::kBlockM;
  const int m_end = (kb.tile0 + kb.tiles) * Cfg::kBlockM;
#pragma unroll 1
  for (int j = 0; j < kb.steps(p); ++j, m0 += Cfg::kBlockM) {
    if (m0 == m_end) {
      m0 = kb.tile0 * Cfg::kBlockM;
      ++head;
    }
    const int slot = j % L::kQSlots;
    const long long row0 = lse_row0<Cfg::kVarlen>(p, seq, kb.batch, head) + m0;
    // This lane's rows' LSE and D (0 past the sequence end), requested before the slot frees
    // so that their latency runs beside the consumers' step, not after the wait.
    float lse[kLaneRows], d[kLaneRows];
#pragma unroll
    for (int i = 0; i < kLaneRows; ++i) {
      const int r = lane + 32 * i;
      const bool valid = r < Cfg::kBlockM && m0 + r < seq.seqlen_q;
      lse[i] = lse_of_row(p.lse, row0 + r, valid);
      d[i] = valid ? p.d_rows[row0 + r] : 0.f;
    }
    mbar_wait(sm.empty(slot), ((j / L::kQSlots) & 1) ^ 1);  // the first pass finds it free
    const u32 rows = sm.rows_at(slot);
    if constexpr (!L::kOneDoSlot) {
      if (lane == 0) {
        mbar_expect_tx(sm.full(slot), L::kQBytes + L::kDoBytes);
        load_q(slot, m0, head, sm.full(slot));
        load_do(slot, m0, head, sm.full(slot));
      }
      store_rows(rows, lse, true);
      store_rows(rows + 4 * Cfg::kBlockM, d, false);
      mbar_arrive(sm.full(slot));  // this lane's rows are written
    } else {
      // Q with the rows' LSE, then dO with their D once its one slot frees (both consumers'
      // dV^T products of the step before are done).
      if (lane == 0) {
        mbar_expect_tx(sm.full(slot), L::kQBytes);
        load_q(slot, m0, head, sm.full(slot));
      }
      store_rows(rows, lse, true);
      mbar_arrive(sm.full(slot));  // this lane's LSE rows are written
      mbar_wait(sm.do_empty(), (j & 1) ^ 1);
      if (lane == 0) {
        mbar_expect_tx(sm.do_full(), L::kDoBytes);
        load_do(0, m0, head, sm.do_full());
      }
      store_rows(rows + 4 * Cfg::kBlockM, d, false);
      mbar_arrive(sm.do_full());  // this lane's D rows are written
    }
  }
}

// One consumer warp group (index c: keys n0 + 64c ..): every step, then its rows of dK, dV.
template <class Cfg, DqAdds kDq>
__device__ __forceinline__ void consume(const Smem<Cfg, kDq>& sm, const BwdParams& p,
                                        const KeyBlock<Cfg>& kb, int c) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  constexpr int kQT = L::kQTiles, kBM = Cfg::kBlockM;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int key0 = kb.n0 + c * L::kConsumerKeys;  // this warp group's first key
  const int dk_col0 = kb.split * Cfg::kDkSlice, dv_col0 = kb.split * Cfg::kDvSlice;
  const int dk_cols = Cfg::kHeadDimQk - dk_col0;  // valid columns of this split (<= 0: none)
  const int dv_cols = Cfg::kHeadDimV - dv_col0;
  const u32 k_rows = sm.k() + c * L::kConsumerKeys * L::kRow;
  const u32 v_rows = sm.v() + c * L::kConsumerKeys * L::kRow;

  float acc_dk[L::kDkTiles][4], acc_dv[L::kDvTiles][4];
  zero_tiles(acc_dk);
  zero_tiles(acc_dv);

  mbar_wait(sm.kv_full(), 0);
#pragma unroll 1
  for (int j = 0; j < kb.steps(p); ++j) {
    const int slot = j % Cfg::kStages;
    const int m0 = kb.m0(j);
    mbar_wait(sm.full(slot), (j / Cfg::kStages) & 1);
    float s[kQT][4], dp[kQT][4];
    u32 x[kBM / 16][4], xp[kBM / 16][4];  // xp: P^T where dV's product follows dS^T
    wgmma_fence();
    wgmma_ss_k_major<kBM, Cfg::kDqkPad / 16, L::kRow>(s, k_rows, L::kKPanelBytes, sm.q(slot),
                                             L::kQPanelBytes);
    wgmma_commit();
    wgmma_ss_k_major<kBM, Cfg::kDvPad / 16, L::kRow>(dp, v_rows, L::kKPanelBytes, sm.d_o(slot),
                                            L::kQPanelBytes);
    wgmma_commit();
    const bool masked =
        block_needs_mask<Cfg>(m0, kBM, key0, L::kConsumerKeys, kb.seq.seqlen_k, kb.seq.diag);
    const float* lse_log2 = sm.rows(slot);
    const float* d_rows = lse_log2 + kBM;
    const u32 dv_panel = sm.d_o(slot) + dv_col0 / L::kPanelCols * L::kQPanelBytes;
    // Element e of n8 tile t (query column `col` in this lane's registers): S^T into P^T, and
    // dP^T into dS^T, the same in every step order below.
    const auto to_p = [&](int t, int e) {
      const int col = t * 8 + (lane % 4) * 2 + e % 2;
      s[t][e] = exp2_approx(fmaf(s[t][e], p.scale_log2, -lse_log2[col]));
    };
    const auto to_ds = [&](int t, int e) {
      const int col = t * 8 + (lane % 4) * 2 + e % 2;
      dp[t][e] = s[t][e] * (dp[t][e] - d_rows[col]);
    };
    const auto mask = [&] {
      mask_scores_transposed<Cfg, L::kAccumulateDq>(s, key0 + warp * 16 + lane / 4, m0,
                                                    kb.seq.diag, lane, kb.seq.seqlen_k);
    };

    if constexpr (L::kAccumulateDq) {
      // FlashAttention-3's order: P^T while dP^T is in flight, dS^T, both packed (S^T's and
      // dP^T's registers free as they go), dS^T to shared memory, then dV's product under the
      // dS^T barrier, dQ's, and dK's under the staging of dQ's tile.
      wgmma_wait<1>();  // S^T has landed
      if (masked) mask();
#pragma unroll
      for (int t = 0; t < kQT; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) to_p(t, e);
      wgmma_wait<0>();  // dP^T has landed
#pragma unroll
      for (int t = 0; t < kQT; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) to_ds(t, e);
        if (t % 2 == 1) {
          pack_k16_step<Element>(xp[t / 2], s[t - 1], s[t]);
          pack_k16_step<Element>(x[t / 2], dp[t - 1], dp[t]);
        }
      }
      // Both consumers' dS^T in the buffer; the other's dQ product of two steps ago, which
      // read it, is done (each passes the barrier only after finishing its step before). The
      // staged dQ tiles have their own mbarriers with the dQ writer.
      const u32 ds = sm.ds(j % L::kDsBuffers);
      store_ds_transposed(ds, L::kDsPanelBytes, x, c * L::kConsumerKeys + warp * 16 + lane / 4,
                          lane);
      fence_proxy_async_shared();
      wgmma_fence();
      wgmma_rs_mn_major_live<Cfg::kDvSlice, L::kDvValid, kBM / 16, L::kRow>(acc_dv, xp, dv_panel,
                                                                            L::kQPanelBytes);
      wgmma_commit();
      named_sync(kDsReadyBarrier, 256);
      // This consumer's rows and columns of dQ; a block holds every split's shares,
      // kDqTileRows x their width each, and has a counter a consumer's share.
      const int dq_m0 = L::kDqRowsSplit ? m0 + c * kDqTileRows : m0;
      const int share_col0 = dk_col0 + (L::kDqRowsSplit || c == 0 ? 0 : L::kDqCols0);
      const DqShare share =
          dq_share<Cfg, kDq>(p, kb, j, m0, dq_m0, Cfg::kDvSplits * Cfg::kDkSlice, share_col0,
                             L::kDqRowsSplit, L::kDqRowsSplit ? 0 : c);
      const u32 k_cols = sm.k_cols(share_col0);
      const DqStage stage{sm.dq_stage(c), sm.dq_staged(c), sm.dq_free(c), sm.dq_mailbox(c)};
      const u32 q_panel = sm.q(slot) + dk_col0 / L::kPanelCols * L::kQPanelBytes;
      if constexpr (L::kDqRowsSplit)
        dq_then_dk<Cfg, kDq, Cfg::kDkSlice, 0>(acc_dk, x, q_panel, ds + c * L::kDsPanelBytes,
                                               k_cols, stage, c, j, share, warp, lane);
      else if (c == 0)
        dq_then_dk<Cfg, kDq, L::kDqCols0, 0>(acc_dk, x, q_panel, ds, k_cols, stage, c, j, share,
                                             warp, lane);
      else
        dq_then_dk<Cfg, kDq, L::kDqCols1, L::kDqCols0>(acc_dk, x, q_panel, ds, k_cols, stage, c,
                                                       j, share, warp, lane);
      mbar_arrive(sm.empty(slot));
      continue;
    }

    // Without dQ: P^T packed, dV's product issued and running while dS^T is computed.
    wgmma_wait<1>();  // S^T has landed (dP^T may be in flight)
    if (masked) mask();
#pragma unroll
    for (int t = 0; t < kQT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) to_p(t, e);
    pack_k16_steps<Element>(x, s);
    if (dv_cols > 0) {
      wgmma_fence();
      wgmma_rs_mn_major_live<Cfg::kDvSlice, L::kDvValid, kBM / 16, L::kRow>(acc_dv, x, dv_panel,
                                                                            L::kQPanelBytes);
      wgmma_commit();
      wgmma_wait<1>();  // dP^T has landed; dV's product may still run
    } else {
      wgmma_wait<0>();  // dP^T has landed
    }
    if (dk_cols > 0) {
#pragma unroll
      for (int t = 0; t < kQT; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) to_ds(t, e);
      wgmma_wait<0>();  // dV's product is done with x
      pack_k16_steps<Element>(x, dp);
      wgmma_fence();
      wgmma_rs_mn_major_live<Cfg::kDkSlice, L::kDkValid, kBM / 16, L::kRow>(
          acc_dk, x, sm.q(slot) + dk_col0 / L::kPanelCols * L::kQPanelBytes, L::kQPanelBytes);
      wgmma_commit();
    }
    wgmma_wait<0>();
    mbar_arrive(sm.empty(slot));
  }

  // ---- epilogue: every key row of the block is written, zeros for keys no query sees.
  const bool varlen = Cfg::kVarlen;
  const Sequence& seq = kb.seq;
  const long long dk_row0 = varlen ? seq.k_start * p.dk_seq_stride : kb.batch * p.dk_batch_stride;
  const long long dv_row0 = varlen ? seq.k_start * p.dv_seq_stride : kb.batch * p.dv_batch_stride;
  const int key = key0 + warp * 16;
  if (dk_cols > 0) {
    Storage* dk = static_cast<Storage*>(p.d_k) + dk_row0 + kb.kv_head * p.dk_head_stride +
                  key * p.dk_seq_stride + dk_col0;
    store_scaled_rows<Cfg>(acc_dk, p.softmax_scale, dk, p.dk_seq_stride, key, seq.seqlen_k,
                           dk_cols, lane);
  }
  if (dv_cols > 0) {
    Storage* dv = static_cast<Storage*>(p.d_v) + dv_row0 + kb.kv_head * p.dv_head_stride +
                  key * p.dv_seq_stride + dv_col0;
    store_scaled_rows<Cfg>(acc_dv, 1.f, dv, p.dv_seq_stride, key, seq.seqlen_k, dv_cols, lane);
  }
}

}  // namespace sm90_bwd

template <class Cfg, DqAdds kDq>
__device__ __forceinline__ void bwd_dkdv_sm90_body(const BwdParams& p, const TmaDesc* tm_q,
                                                   const TmaDesc* tm_k, const TmaDesc* tm_v,
                                                   const TmaDesc* tm_do) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  // Declared 1024-byte aligned, as the swizzled tiles must be, so that the budget needs no
  // slack to align them (d80's 128-query tiles fit with 984 bytes to spare, not without).
  // The address is still rounded up: computed so, the ordered variant's consumers keep their
  // registers (taken as it is, ptxas spilled 8-12 bytes at d64).
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = (raw + 1023u) & ~1023u;
  if (base != raw) __trap();  // a toolchain that did not honour the alignment
  const sm90_bwd::Smem<Cfg, kDq> sm{base, smem_raw + (base - raw)};
  const sm90_bwd::KeyBlock<Cfg> kb(p, kDq == DqAdds::kKeyOrder && (Cfg::kCausal || Cfg::kWindow));
  if (kb.n0 >= kb.seq.seqlen_k) return;  // the whole CTA: these keys do not exist

  // Read from lane 0 so that ptxas sees a warp-uniform value (see fwd_sm90).
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(tm_q);
    tma_prefetch_descriptor(tm_k);
    tma_prefetch_descriptor(tm_v);
    tma_prefetch_descriptor(tm_do);
    mbar_init(sm.kv_full(), 1);
    for (int slot = 0; slot < L::kQSlots; ++slot) {
      mbar_init(sm.full(slot), 32);  // every producer lane: its rows (lane 0 announced the bytes)
      // Every consumer thread arrives once its reads of the slot are done: the LSE and D rows
      // are read by every lane (one lane's arrival after a __syncwarp would order them too,
      // but compute-sanitizer's racecheck credits a release only to the threads that arrive).
      mbar_init(sm.empty(slot), L::kConsumerThreads);
    }
    if constexpr (L::kAccumulateDq)
      for (int c = 0; c < 2; ++c) {
        mbar_init(sm.dq_staged(c), 128);  // every thread of consumer c: its part of the tile
        mbar_init(sm.dq_free(c), 1);      // the dQ writer, once the add has read the stage
      }
    if constexpr (L::kOneDoSlot) {
      mbar_init(sm.do_full(), 32);                      // as a Q slot's full
      mbar_init(sm.do_empty(), L::kConsumerThreads);  // every consumer thread, after dV^T
    }
    if constexpr (L::kPaired) {
      mbar_init(sm.pt_full(), 128);   // the first consumer's threads
      mbar_init(sm.pt_empty(), 128);  // the second's
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (warp_group == 0) {
    regs_release<ws_regs::kProducer>();
    if (threadIdx.x < 32) sm90_bwd::produce<Cfg>(sm, p, kb, tm_q, tm_k, tm_v, tm_do);
    else if constexpr (L::kAccumulateDq)
      if (threadIdx.x == 32) sm90_bwd::write_dq<Cfg, kDq>(sm, kb.steps(p));
  } else {
    regs_claim<ws_regs::kConsumer>();
    if constexpr (L::kPaired) {
      if (warp_group == 1) sm90_bwd::consume_paired<Cfg, kDq, true>(sm, p, kb);
      else sm90_bwd::consume_paired<Cfg, kDq, false>(sm, p, kb);
    } else if constexpr (L::kSwapped) {
      sm90_bwd::consume_swapped<Cfg>(sm, p, kb, warp_group - 1);
    } else {
      sm90_bwd::consume<Cfg, kDq>(sm, p, kb, warp_group - 1);
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void bwd_dkdv_sm90(const BwdParams& p, const TmaDesc* tm_q,
                                              const TmaDesc* tm_k, const TmaDesc* tm_v,
                                              const TmaDesc* tm_do) {
  bwd_dkdv_sm90_body<Cfg, DqAdds::kNone>(p, tm_q, tm_k, tm_v, tm_do);
}
template <class Cfg>
__device__ __forceinline__ void bwd_dkdv_dq_sm90(const BwdParams& p, const TmaDesc* tm_q,
                                                 const TmaDesc* tm_k, const TmaDesc* tm_v,
                                                 const TmaDesc* tm_do) {
  bwd_dkdv_sm90_body<Cfg, DqAdds::kAnyOrder>(p, tm_q, tm_k, tm_v, tm_do);
}
template <class Cfg>
__device__ __forceinline__ void bwd_dkdv_dq_ordered_sm90(const BwdParams& p, const TmaDesc* tm_q,
                                                         const TmaDesc* tm_k, const TmaDesc* tm_v,
                                                         const TmaDesc* tm_do) {
  bwd_dkdv_sm90_body<Cfg, DqAdds::kKeyOrder>(p, tm_q, tm_k, tm_v, tm_do);
}

}  // namespace fj
