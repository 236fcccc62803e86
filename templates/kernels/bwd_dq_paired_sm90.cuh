// The sm90 dQ kernel's paired consumers (kernels/bwd_dq_sm90.cuh): two warp groups on the
// same 64 query rows, one computing S and P, the other dP and dS, each then its share of
// dQ's columns.
#pragma once

#include "bwd_dq_sm90_layout.cuh"

namespace fj {
namespace sm90_bwd_dq {

// Paired consumers (64 rows a CTA, at head dims whose dQ one consumer cannot hold beside S and
// dP, or whose Q and dO of 128 rows leave no room for a key tile), per key tile:
//   kFirst:  S = Q K^T, P = exp2(scale_log2 S - LSE_log2), handed to the second through
//            shared memory; dS back from the second; dQ[:, ..kDqCols0) += dS K
//   second:  dP = dO V^T; dS = P (dP - D), handed to the first; dQ[:, kDqCols0..) += dS K
// Each hands its tile over in its registers' order (the two warp groups' accumulators and
// wgmma A fragments have the same layout), guarded by a full and an empty mbarrier. A tile's
// dQ products run while the next tile's S and dP are issued; both consumers release the slot.
template <class Cfg, bool kFirst>
__device__ __forceinline__ void consume_paired(const Smem<Cfg>& sm, const BwdParams& p,
                                               const RowBlock<Cfg>& rb) {
  using L = Sm90BwdDqLayout<Cfg>;
  using Element = typename Cfg::Element;
  constexpr int kST = L::kSTiles, kBN = Cfg::kBlockN;
  constexpr int kCols = kFirst ? L::kDqCols0 : L::kDqCols1;  // this consumer's dQ share
  constexpr int kCol0 = kFirst ? 0 : L::kDqCols0;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4, thread = threadIdx.x % 128;
  const int row = rb.m0 + warp * 16 + lane / 4;  // this thread's first row (and row + 8)

  // The first's rows' LSE in the log2 domain, the second's D (0 past the sequence end).
  const Sequence& seq = rb.seq;
  const long long row0 = lse_row0<Cfg::kVarlen>(p, seq, rb.batch, rb.head);
  float rows[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const bool valid = row + 8 * h < seq.seqlen_q;
    rows[h] = kFirst ? lse_log2_of_row(p.lse, row0 + row + 8 * h, valid)
                     : (valid ? p.d_rows[row0 + row + 8 * h] : 0.f);
  }

  float acc[kCols / 8][4];
  zero_tiles(acc);
  float s[kST][4];  // S then P (the first), dP then dS (the second)
  u32 x[kBN / 16][4];

  mbar_wait(sm.q_full(), 0);
#pragma unroll 1
  for (int n = 0; n < rb.tiles; ++n) {
    const int slot = n % Cfg::kStages;
    const int key0 = (rb.tile0 + n) * kBN;
    mbar_wait(sm.full(slot), (n / Cfg::kStages) & 1);
    wgmma_fence();
    if constexpr (kFirst)
      wgmma_ss_k_major<kBN, Cfg::kDqkPad / 16>(s, sm.q(), L::kQPanelBytes, sm.k(slot),
                                               L::kKPanelBytes);
    else
      wgmma_ss_k_major<kBN, Cfg::kDvPad / 16>(s, sm.d_o(), L::kQPanelBytes, sm.v(slot),
                                              L::kKPanelBytes);
    wgmma_commit();
    wgmma_wait<0>();  // this tile's S (or dP) and the last tile's dQ product have landed
    if (Cfg::kStages > 1 && n > 0 && lane == 0) mbar_arrive(sm.empty((n - 1) % Cfg::kStages));

    if constexpr (kFirst) {
      if (block_needs_mask<Cfg>(rb.m0, L::kConsumerRows, key0, kBN, seq.seqlen_k, seq.diag))
        mask_scores<Cfg>(s, row, key0, seq.seqlen_k, seq.diag, lane);
      if (n > 0) mbar_wait(sm.p_empty(), (n - 1) & 1);  // the second has read the last P
#pragma unroll
      for (int t = 0; t < kST; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[t][e] = exp2_approx(fmaf(s[t][e], p.scale_log2, -rows[e / 2]));
        sm.p()[t * 128 + thread] = make_float4(s[t][0], s[t][1], s[t][2], s[t][3]);
      }
      mbar_arrive(sm.p_full());
      mbar_wait(sm.ds_full(), n & 1);
#pragma unroll
      for (int t = 0; t < kBN / 16; ++t) {
        const uint4 ds = sm.ds()[t * 128 + thread];
        x[t][0] = ds.x;
        x[t][1] = ds.y;
        x[t][2] = ds.z;
        x[t][3] = ds.w;
      }
      mbar_arrive(sm.ds_empty());
    } else {
      mbar_wait(sm.p_full(), n & 1);
#pragma unroll
      for (int t = 0; t < kST; ++t) {
        const float4 pt = sm.p()[t * 128 + thread];
        const float pe[4] = {pt.x, pt.y, pt.z, pt.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) s[t][e] = pe[e] * (s[t][e] - rows[e / 2]);
      }
      mbar_arrive(sm.p_empty());
      pack_k16_steps<Element>(x, s);
      if (n > 0) mbar_wait(sm.ds_empty(), (n - 1) & 1);  // the first has read the last dS
#pragma unroll
      for (int t = 0; t < kBN / 16; ++t)
        sm.ds()[t * 128 + thread] = make_uint4(x[t][0], x[t][1], x[t][2], x[t][3]);
      mbar_arrive(sm.ds_full());
    }
    wgmma_fence();
    wgmma_rs_mn_major<kCols, kBN / 16>(acc, x, sm.k(slot) + kCol0 / 64 * L::kKPanelBytes,
                                       L::kKPanelBytes);
    wgmma_commit();
    end_tile(sm, slot, lane);
  }
  finish_dq(sm, p, rb, acc, rb.m0, kCol0, warp, lane);
}

}  // namespace sm90_bwd_dq
}  // namespace fj
