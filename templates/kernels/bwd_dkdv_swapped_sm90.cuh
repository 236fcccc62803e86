// The sm90 dK/dV kernel's swapped consumers (kernels/bwd_dkdv_sm90.cuh), FlashAttention-3's
// tiles at head dims whose dK and dV one 64-key consumer cannot hold (d136-d192, 192/128): 96
// keys a CTA, 48 a consumer, which wgmma can only take as N. So each consumer computes
//   S = Q K^T and dP = dO V^T      (M = the step's 64 query rows, N = its 48 keys)
//   P and dS = P (dP - D)          (the rows' LSE and D in registers: rows are queries)
// writes P^T and dS^T to shared memory (stmatrix, transposed: key rows of 64 queries, the
// dS^T tile's layout), and accumulates the transposes
//   dV^T += dO^T P                 (M = dV's columns, 64 a product; A = dO read MN-major,
//   dK^T += Q^T dS                  B = its own P^T or dS^T rows, K-major)
// then its share of dQ = dS K over both consumers' keys, as the 128-key consumers do. Its
// accumulators hold 3/8 of a register a column of dK and dV, where a 64-key consumer holds 1/2,
// so dK, dV, and S, dP or the dQ share fit up to d192 beside each other, and no separate dQ
// kernel recomputes S and dP (five products a step instead of seven over two kernels). Where
// two ring slots do not fit (d136-d192), Q keeps two and dO and dS^T take one
// (Sm90BwdDkDvLayoutOf::kOneDoSlot), as FlashAttention-3's stages there.
#pragma once

#include "bwd_dkdv_sm90_dq.cuh"

namespace fj {
namespace sm90_bwd {

// The named barriers (after kDsReadyBarrier) that say consumer c's P^T rows are in shared
// memory, before its dV^T product reads them; and with one dS^T buffer, that consumer c's dQ
// product is done with it, before the other writes the next step's rows.
// (Enumerators: a constexpr variable draws NVRTC's "declared but never referenced" warning
// from every kernel that includes this file without instantiating the swapped consumers.)
enum : u32 { kPtReadyBarrier0 = 2, kDsFreeBarrier0 = 4 };

// This warp's part of S (or dP): 16 query rows x the consumer's 48 keys, packed and stored
// transposed into the key rows `key_row0` on of a tile of 128-byte rows (64 queries, TMA's
// 128-byte swizzle: chunk q of row r at q ^ (r % 8)). stmatrix's tile i is n8 tile
// 2 pair + i / 2, query half i % 2.
template <class Element, int kTiles>
__device__ __forceinline__ void store_transposed(u32 tile, const float (&s)[kTiles][4],
                                                 int key_row0, int warp, int lane) {
#pragma unroll
  for (int pair = 0; pair < kTiles / 2; ++pair) {
    u32 x[4];
    pack_k16_step<Element>(x, s[2 * pair], s[2 * pair + 1]);
    const int i = lane / 8;
    const int row = key_row0 + (2 * pair + i / 2) * 8 + lane % 8;
    const int chunk = 2 * warp + i % 2;
    stmatrix_x4_trans(tile + row * 128 + ((chunk ^ (row % 8)) << 4), x);
  }
}

// dK^T or dV^T (kCols head-dim rows, 64 a product, of the consumer's 48 keys) += the slot's
// tile (Q or dO, read MN-major: query rows down its panels) times the consumer's rows of P^T or
// dS^T, one commit group.
template <class Cfg, int kCols, class Acc>
__device__ __forceinline__ void issue_transposed_product(Acc& acc, u32 tile, u32 rows) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, DqAdds::kAnyOrder>;
  constexpr int kN = L::kConsumerKeys;
  wgmma_fence();
#pragma unroll
  for (int mb = 0; mb < kCols / 64; ++mb) {
    // 64 columns of the tile: one 128-byte panel, or 64 / kPanelCols narrower ones.
    const u32 a = tile + mb * (64 / L::kPanelCols) * L::kQPanelBytes;
    auto& d = reinterpret_cast<float(&)[kN / 8][4]>(acc[mb * (kN / 8)]);
    wgmma_ss_a_mn_major<kN, Cfg::kBlockM / 16, L::kRow, L::kDsRow>(d, a, L::kQPanelBytes, rows);
  }
  wgmma_commit();
}

// A step's end, dV^T's product in flight: the consumer's dQ share (kCols columns from kCol0,
// over both consumers' dS^T in `ds`), then dK^T's product from its own dS^T rows, and the
// share staged while dK^T's runs. Once dV^T's and dQ's products are done it frees dO's own
// slot (`do_empty`, where dO has one) and says it is done with the one dS^T buffer
// (`ds_free`, where there is one and a step follows). Returns with every product done.
template <class Cfg, int kCol0, int kCols, int kDkRows, class DkAcc>
__device__ __forceinline__ void dq_then_dk_swapped(DkAcc& acc_dk, u32 q, u32 ds, u32 ds_rows,
                                                   u32 k_cols, const DqStage& stage, int c, int j,
                                                   const DqShare& share, u32 do_empty,
                                                   bool ds_free, int warp, int lane) {
  constexpr DqAdds kDq = DqAdds::kAnyOrder;
  float acc_dq[kCols / 8][4];
  issue_dq_product<Cfg, kDq, kCols, kCol0>(acc_dq, ds, k_cols);
  issue_transposed_product<Cfg, kDkRows>(acc_dk, q, ds_rows);
  wgmma_wait<1>();  // dV^T's and dQ's products are done
  if (do_empty != 0) mbar_arrive(do_empty);
  if (ds_free) named_arrive(kDsFreeBarrier0 + c, 256);
  stage_dq<Cfg, kDq, kCols, kCol0>(acc_dq, stage, c, j, share, warp, lane);
  wgmma_wait<0>();
}

// dK or dV from the transposed accumulator (kBlocks products of 64 head-dim rows, each kKT n8
// tiles of the consumer's keys from key0), scaled: key rows past the sequence and columns past
// the head dim are not stored.
template <class Cfg, int kBlocks, int kKT>
__device__ __forceinline__ void store_transposed_rows(const float (&acc)[kBlocks * kKT][4],
                                                      float scale,
                                                      typename Cfg::Element::Storage* out,
                                                      long long seq_stride, int key0,
                                                      int seqlen_k, int cols, int warp,
                                                      int lane) {
  using Storage = typename Cfg::Element::Storage;
#pragma unroll
  for (int mb = 0; mb < kBlocks; ++mb)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int col = mb * 64 + warp * 16 + lane / 4 + half * 8;
      if (col >= cols) continue;
#pragma unroll
      for (int t = 0; t < kKT; ++t)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key0 + t * 8 + (lane % 4) * 2 + e;
          if (key >= seqlen_k) continue;
          const u32 packed = Cfg::Element::pack(acc[mb * kKT + t][half * 2 + e] * scale, 0.f);
          out[key * seq_stride + col] = static_cast<Storage>(packed & 0xffffu);
        }
    }
}

template <class Cfg>
__device__ __forceinline__ void consume_swapped(const Smem<Cfg, DqAdds::kAnyOrder>& sm,
                                                const BwdParams& p, const KeyBlock<Cfg>& kb,
                                                int c) {
  constexpr DqAdds kDq = DqAdds::kAnyOrder;
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  constexpr int kKeys = L::kConsumerKeys, kKT = kKeys / 8, kBM = Cfg::kBlockM;
  // dK^T's and dV^T's M: the padded head dims in whole 64-row products.
  constexpr int kDkRows = budget::bwd_dkdv_sm90_swapped_rows(Cfg::kDqkPad);
  constexpr int kDvRows = budget::bwd_dkdv_sm90_swapped_rows(Cfg::kDvPad);
  static_assert(L::kQPanels * L::kPanelCols >= kDkRows && L::kDoPanels * L::kPanelCols >= kDvRows,
                "Q's and dO's panels hold every 64-row product's columns (zeros past the head dim)");
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int key0 = kb.n0 + c * kKeys;  // this warp group's first key
  const u32 k_rows = sm.k() + c * kKeys * L::kRow;
  const u32 v_rows = sm.v() + c * kKeys * L::kRow;
  const u32 pt_rows = sm.pt_tile() + c * kKeys * L::kDsRow;

  // dK^T and dV^T: head-dim row block mb's n8 tiles of keys at [mb * kKT ..].
  float acc_dk[kDkRows / 64 * kKT][4], acc_dv[kDvRows / 64 * kKT][4];
  zero_tiles(acc_dk);
  zero_tiles(acc_dv);

  mbar_wait(sm.kv_full(), 0);
  const int steps = kb.steps(p);
#pragma unroll 1
  for (int j = 0; j < steps; ++j) {
    const int slot = j % L::kQSlots;
    const int m0 = kb.m0(j);
    // dO's tile: in the Q slot's ring slot, or in its own one slot (L::kOneDoSlot).
    const u32 d_o = sm.d_o(L::kOneDoSlot ? 0 : slot);
    mbar_wait(sm.full(slot), (j / L::kQSlots) & 1);
    float s[kKT][4], dp[kKT][4];
    wgmma_fence();
    wgmma_ss_k_major<kKeys, Cfg::kDqkPad / 16, L::kRow>(s, sm.q(slot), L::kQPanelBytes, k_rows,
                                                         L::kKPanelBytes);
    wgmma_commit();
    if constexpr (L::kOneDoSlot) mbar_wait(sm.do_full(), j & 1);
    wgmma_fence();
    wgmma_ss_k_major<kKeys, Cfg::kDvPad / 16, L::kRow>(dp, d_o, L::kQPanelBytes, v_rows,
                                                        L::kKPanelBytes);
    wgmma_commit();
    // This thread's two query rows of the step: their LSE (log2 domain) and D.
    const float* rows = sm.rows(slot);
    const int r0 = warp * 16 + lane / 4;
    const float lse[2] = {rows[r0], rows[r0 + 8]};
    const float d_row[2] = {rows[kBM + r0], rows[kBM + r0 + 8]};
    const bool masked =
        block_needs_mask<Cfg>(m0, kBM, key0, kKeys, kb.seq.seqlen_k, kb.seq.diag);

    wgmma_wait<1>();  // S has landed
    if (masked) mask_scores<Cfg>(s, m0 + r0, key0, kb.seq.seqlen_k, kb.seq.diag, lane);
    probabilities_of_rows(s, p.scale_log2, lse);
    wgmma_wait<0>();  // dP has landed
    score_gradients_of_rows(dp, s, d_row);

    // P^T into this consumer's rows (its last dV^T product, which read them, is done), dS^T
    // into the step's buffer: with two, both consumers' products of two steps ago, which read
    // it, are done (each passed the last step's dS^T barrier only after finishing its step
    // before); with one, the other's dQ product of the step before says so.
    const u32 ds = sm.ds(j % L::kDsBuffers);
    store_transposed<Element>(pt_rows, s, 0, warp, lane);
    if (L::kDsBuffers == 1 && j > 0) named_sync(kDsFreeBarrier0 + (1 - c), 256);
    store_transposed<Element>(ds, dp, c * kKeys, warp, lane);
    fence_proxy_async_shared();
    named_sync(kPtReadyBarrier0 + c, 128);
    issue_transposed_product<Cfg, kDvRows>(acc_dv, d_o, pt_rows);
    named_sync(kDsReadyBarrier, 256);

    // dQ's share (over both consumers' keys) while dV^T's product runs, then dK^T's, and the
    // share staged while dK^T's runs.
    const int share_col0 = c == 0 ? 0 : L::kDqCols0;
    const DqShare share = dq_share<Cfg, kDq>(p, kb, j, m0, m0, Cfg::kDkSlice, share_col0, false, c);
    const DqStage stage{sm.dq_stage(c), sm.dq_staged(c), sm.dq_free(c), sm.dq_mailbox(c)};
    const u32 k_cols = sm.k_cols(share_col0);
    const u32 ds_rows = ds + c * kKeys * L::kDsRow;
    const u32 do_empty = L::kOneDoSlot ? sm.do_empty() : 0;
    const bool ds_free = L::kDsBuffers == 1 && j + 1 < steps;
    if (c == 0)
      dq_then_dk_swapped<Cfg, 0, L::kDqCols0, kDkRows>(acc_dk, sm.q(slot), ds, ds_rows, k_cols,
                                                       stage, c, j, share, do_empty, ds_free,
                                                       warp, lane);
    else
      dq_then_dk_swapped<Cfg, L::kDqCols0, L::kDqCols1, kDkRows>(
          acc_dk, sm.q(slot), ds, ds_rows, k_cols, stage, c, j, share, do_empty, ds_free, warp,
          lane);
    mbar_arrive(sm.empty(slot));
  }

  // ---- epilogue: dK = dK^T's transpose (scaled) and dV, every key row of the block; keys no
  // query sees hold zeros.
  const Sequence& seq = kb.seq;
  const long long dk_row0 = Cfg::kVarlen ? seq.k_start * p.dk_seq_stride : kb.batch * p.dk_batch_stride;
  const long long dv_row0 = Cfg::kVarlen ? seq.k_start * p.dv_seq_stride : kb.batch * p.dv_batch_stride;
  Storage* dk = static_cast<Storage*>(p.d_k) + dk_row0 + kb.kv_head * p.dk_head_stride;
  Storage* dv = static_cast<Storage*>(p.d_v) + dv_row0 + kb.kv_head * p.dv_head_stride;
  store_transposed_rows<Cfg, kDkRows / 64, kKT>(acc_dk, p.softmax_scale, dk, p.dk_seq_stride,
                                                key0, seq.seqlen_k, Cfg::kHeadDimQk, warp, lane);
  store_transposed_rows<Cfg, kDvRows / 64, kKT>(acc_dv, 1.f, dv, p.dv_seq_stride, key0,
                                                seq.seqlen_k, Cfg::kHeadDimV, warp, lane);
}

}  // namespace sm90_bwd
}  // namespace fj
