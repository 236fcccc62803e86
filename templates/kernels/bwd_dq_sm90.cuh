// The backward's dQ kernel for sm_90a: warp-specialised, TMA + mbarrier + wgmma, deterministic
// like the sm80 kernel (one CTA owns its query rows' dQ and walks their key tiles in order).
//
// A CTA is 128 query rows of one (batch, head) and three warp groups:
//   - warp group 0, the producer, gives most of its registers away; one thread loads the Q and
//     dO rows once (q_full), then the K and V tiles of kBlockN keys the rows see into a
//     kStages-deep ring, each slot guarded by a "full" and an "empty" mbarrier.
//   - warp groups 1 and 2, the consumers, own 64 query rows each. Per key tile:
//       S = Q K^T and dP = dO V^T                (wgmma SS, both K-major)
//       P = exp2(scale_log2 S - LSE_log2), dS = P (dP - D)
//       dQ += dS K                               (wgmma RS: dS from the registers, K MN-major)
//     A tile's dQ product runs while the next tile's S and dP are issued; with one ring slot
//     the next tile's copy needs that slot, so the product is waited for at the step's end.
// The whole of dQ stays in registers (up to d320, whose product runs as 256 + 64 columns),
// scaled once at the end.
//
// Past that (a consumer's dQ beside S and dP, or Q and dO of 128 rows beside a key tile), a
// CTA is 64 query rows and the consumers pair on them (consume_paired): the first computes S
// and P, the second dP and dS, and each its share of dQ's columns, as the dK/dV kernel's
// paired consumers do. S and dP are computed once; at d512 a CTA holds Q and dO of 64 rows
// (128 KB) beside its key tiles.
//
// Config: Element, kHeadDimQk, kHeadDimV, kDqkPad, kDvPad, kDkSlice (= kDqkPad: dQ's columns),
// kBlockM (128, or 64 paired), kBlockN (keys a tile), kStages, kVarlen and the causal and
// window constants.
#pragma once

#include "bwd_dq_paired_sm90.cuh"
#include "bwd_dq_sm90_layout.cuh"

namespace fj {
namespace sm90_bwd_dq {

template <class Cfg>
__device__ __forceinline__ void produce(const Smem<Cfg>& sm, const RowBlock<Cfg>& rb,
                                        const TmaDesc* tm_q, const TmaDesc* tm_k,
                                        const TmaDesc* tm_v, const TmaDesc* tm_do) {
  using L = Sm90BwdDqLayout<Cfg>;
  constexpr int kPanelCols = L::kRow / Cfg::Element::kBytes;  // TMA box columns
  const Sequence& seq = rb.seq;
  const int row = seq.q_start + rb.m0;
  mbar_arrive_expect_tx(sm.q_full(), (L::kQkPanels + L::kVPanels) * L::kQPanelBytes);
#pragma unroll 1
  for (int panel = 0; panel < L::kQkPanels; ++panel)
    tma_load_4d(sm.q() + panel * L::kQPanelBytes, tm_q, panel * kPanelCols, row, rb.head,
                seq.tma_batch, sm.q_full());
#pragma unroll 1
  for (int panel = 0; panel < L::kVPanels; ++panel)
    tma_load_4d(sm.d_o() + panel * L::kQPanelBytes, tm_do, panel * kPanelCols, row, rb.head,
                seq.tma_batch, sm.q_full());
#pragma unroll 1
  for (int n = 0; n < rb.tiles; ++n) {
    const int slot = n % Cfg::kStages;
    mbar_wait(sm.empty(slot), ((n / Cfg::kStages) & 1) ^ 1);  // the first pass finds it free
    const int key = seq.k_start + (rb.tile0 + n) * Cfg::kBlockN;
    mbar_arrive_expect_tx(sm.full(slot), L::kKBytes + L::kVBytes);
#pragma unroll 1
    for (int panel = 0; panel < L::kQkPanels; ++panel)
      tma_load_4d(sm.k(slot) + panel * L::kKPanelBytes, tm_k, panel * kPanelCols, key,
                  rb.kv_head, seq.tma_batch, sm.full(slot));
#pragma unroll 1
    for (int panel = 0; panel < L::kVPanels; ++panel)
      tma_load_4d(sm.v(slot) + panel * L::kKPanelBytes, tm_v, panel * kPanelCols, key,
                  rb.kv_head, seq.tma_batch, sm.full(slot));
  }
}

// One consumer warp group (index c: query rows m0 + 64c ..): every key tile, then its dQ rows.
template <class Cfg>
__device__ __forceinline__ void consume(const Smem<Cfg>& sm, const BwdParams& p,
                                        const RowBlock<Cfg>& rb, int c) {
  using L = Sm90BwdDqLayout<Cfg>;
  using Element = typename Cfg::Element;
  constexpr int kST = L::kSTiles, kBN = Cfg::kBlockN;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int rows0 = rb.m0 + c * L::kConsumerRows;  // this warp group's first row
  const int row = rows0 + warp * 16 + lane / 4;    // this thread's first row (and row + 8)
  const u32 q_rows = sm.q() + c * L::kConsumerRows * L::kRow;
  const u32 do_rows = sm.d_o() + c * L::kConsumerRows * L::kRow;

  // The rows' LSE in the log2 domain and D (0 past the sequence end).
  const Sequence& seq = rb.seq;
  const long long row0 = lse_row0<Cfg::kVarlen>(p, seq, rb.batch, rb.head);
  float lse_log2[2], d_row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const bool valid = row + 8 * h < seq.seqlen_q;
    lse_log2[h] = lse_log2_of_row(p.lse, row0 + row + 8 * h, valid);
    d_row[h] = valid ? p.d_rows[row0 + row + 8 * h] : 0.f;
  }

  float acc_dq[L::kDqTiles][4];
#pragma unroll
  for (int t = 0; t < L::kDqTiles; ++t) acc_dq[t][0] = acc_dq[t][1] = acc_dq[t][2] = acc_dq[t][3] = 0.f;
  float s[kST][4], dp[kST][4];
  u32 x[kBN / 16][4];

  mbar_wait(sm.q_full(), 0);
#pragma unroll 1
  for (int n = 0; n < rb.tiles; ++n) {
    const int slot = n % Cfg::kStages;
    const int key0 = (rb.tile0 + n) * kBN;
    mbar_wait(sm.full(slot), (n / Cfg::kStages) & 1);
    wgmma_fence();
    wgmma_ss_k_major<kBN, Cfg::kDqkPad / 16>(s, q_rows, L::kQPanelBytes, sm.k(slot),
                                             L::kKPanelBytes);
    wgmma_commit();
    wgmma_ss_k_major<kBN, Cfg::kDvPad / 16>(dp, do_rows, L::kQPanelBytes, sm.v(slot),
                                            L::kKPanelBytes);
    wgmma_commit();
    wgmma_wait<1>();  // the last tile's dQ product and this S have landed; dP is in flight
    if (Cfg::kStages > 1 && n > 0 && lane == 0) mbar_arrive(sm.empty((n - 1) % Cfg::kStages));

    if (block_needs_mask<Cfg>(rows0, L::kConsumerRows, key0, kBN, seq.seqlen_k, seq.diag))
      mask_scores<Cfg>(s, row, key0, seq.seqlen_k, seq.diag, lane);
    probabilities_of_rows(s, p.scale_log2, lse_log2);
    wgmma_wait<0>();  // dP has landed
    score_gradients_of_rows(dp, s, d_row);
    pack_k16_steps<Element>(x, dp);
    wgmma_fence();
    wgmma_rs_mn_major<Cfg::kDkSlice, kBN / 16>(acc_dq, x, sm.k(slot), L::kKPanelBytes);
    wgmma_commit();
    end_tile(sm, slot, lane);
  }
  finish_dq(sm, p, rb, acc_dq, rows0, 0, warp, lane);
}

}  // namespace sm90_bwd_dq

template <class Cfg>
__device__ __forceinline__ void bwd_dq_sm90(const BwdParams& p, const TmaDesc* tm_q,
                                            const TmaDesc* tm_k, const TmaDesc* tm_v,
                                            const TmaDesc* tm_do) {
  using L = Sm90BwdDqLayout<Cfg>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = (raw + 1023u) & ~1023u;
  const sm90_bwd_dq::Smem<Cfg> sm{base, smem_raw + (base - raw)};
  const sm90_bwd_dq::RowBlock<Cfg> rb(p);
  if (rb.m0 >= rb.seq.seqlen_q) return;  // the whole CTA: these rows do not exist

  // Read from lane 0 so that ptxas sees a warp-uniform value (see fwd_sm90).
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(tm_q);
    tma_prefetch_descriptor(tm_k);
    tma_prefetch_descriptor(tm_v);
    tma_prefetch_descriptor(tm_do);
    mbar_init(sm.q_full(), 1);
    for (int slot = 0; slot < Cfg::kStages; ++slot) {
      mbar_init(sm.full(slot), 1);
      mbar_init(sm.empty(slot), 8);  // one arrival per consumer warp
    }
    if constexpr (L::kPaired) {
      mbar_init(sm.p_full(), 128);  // the first consumer's threads
      mbar_init(sm.p_empty(), 128);  // the second's
      mbar_init(sm.ds_full(), 128);  // the second's
      mbar_init(sm.ds_empty(), 128);  // the first's
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (warp_group == 0) {
    regs_release<ws_regs::kProducer>();
    if (threadIdx.x == 0) sm90_bwd_dq::produce<Cfg>(sm, rb, tm_q, tm_k, tm_v, tm_do);
  } else {
    regs_claim<ws_regs::kConsumer>();
    if constexpr (L::kPaired) {
      if (warp_group == 1) sm90_bwd_dq::consume_paired<Cfg, true>(sm, p, rb);
      else sm90_bwd_dq::consume_paired<Cfg, false>(sm, p, rb);
    } else {
      sm90_bwd_dq::consume<Cfg>(sm, p, rb, warp_group - 1);
    }
  }
}

}  // namespace fj
