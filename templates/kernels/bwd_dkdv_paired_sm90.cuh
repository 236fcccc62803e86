// The sm90 dK/dV kernel's paired consumers (kernels/bwd_dkdv_sm90.cuh): two warp groups on
// the same 64 keys, one computing S^T, P^T and dV, the other dP^T, dS^T and dK.
#pragma once

#include "bwd_dkdv_sm90_dq.cuh"

namespace fj {
namespace sm90_bwd {

// Paired consumers (64 keys a CTA, at head dims whose dK and dV one consumer cannot hold),
// kFirst: S^T = K Q^T, P^T, dV += P^T dO, then (the dQ variants) the first share of dQ; the
// second: dP^T = V dO^T, dS^T from the first's P^T, dK += dS^T Q, then the other share. Each
// holds only its own accumulator of the block's 64 keys. Without dQ the two meet only at P^T,
// so the first may compute the next step's S^T while the second finishes dK. Past what one
// consumer holds, the dK/dV-only kernel splits the columns over CTAs (kb.split): S^T and dP^T
// over the whole head dims, dV's and dK's products over the split's slices of dO and Q.
template <class Cfg, DqAdds kDq, bool kFirst>
__device__ __forceinline__ void consume_paired(const Smem<Cfg, kDq>& sm, const BwdParams& p,
                                               const KeyBlock<Cfg>& kb) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  constexpr int kQT = L::kQTiles, kBM = Cfg::kBlockM;
  constexpr int kTiles = kFirst ? L::kDvTiles : L::kDkTiles;
  constexpr int c = kFirst ? 0 : 1;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4, thread = threadIdx.x % 128;
  // This consumer's slice: its first column and how many of its columns exist. None (<= 0)
  // in the last split of a head that rounds up to one slice (64/512): its product runs on the
  // zeros TMA filled in and nothing is stored (a branch around it made ptxas fence the
  // wgmmas, C7519).
  const int col0 = kb.split * (kFirst ? Cfg::kDvSlice : Cfg::kDkSlice);
  const int cols = (kFirst ? Cfg::kHeadDimV : Cfg::kHeadDimQk) - col0;
  const u32 slice_panel = col0 / L::kPanelCols * L::kQPanelBytes;  // of dO's tile, or of Q's

  float acc[kTiles][4];
  zero_tiles(acc);

  mbar_wait(sm.kv_full(), 0);
#pragma unroll 1
  for (int j = 0; j < kb.steps(p); ++j) {
    const int slot = j % Cfg::kStages;
    const int m0 = kb.m0(j);
    mbar_wait(sm.full(slot), (j / Cfg::kStages) & 1);
    float s[kQT][4];
    u32 x[kBM / 16][4];
    wgmma_fence();
    if constexpr (kFirst)
      wgmma_ss_k_major<kBM, Cfg::kDqkPad / 16, L::kRow>(s, sm.k(), L::kKPanelBytes, sm.q(slot),
                                               L::kQPanelBytes);
    else
      wgmma_ss_k_major<kBM, Cfg::kDvPad / 16, L::kRow>(s, sm.v(), L::kKPanelBytes, sm.d_o(slot),
                                              L::kQPanelBytes);
    wgmma_commit();
    wgmma_wait<0>();
    const float* lse_log2 = sm.rows(slot);
    const float* d_rows = lse_log2 + kBM;
    if constexpr (kFirst) {
      if (block_needs_mask<Cfg>(m0, kBM, kb.n0, L::kConsumerKeys, kb.seq.seqlen_k, kb.seq.diag))
        mask_scores_transposed<Cfg, L::kAccumulateDq>(s, kb.n0 + warp * 16 + lane / 4, m0,
                                                      kb.seq.diag, lane, kb.seq.seqlen_k);
      if (kDq == DqAdds::kNone && j > 0) mbar_wait(sm.pt_empty(), (j - 1) & 1);
#pragma unroll
      for (int t = 0; t < kQT; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = t * 8 + (lane % 4) * 2 + e % 2;
          s[t][e] = exp2_approx(fmaf(s[t][e], p.scale_log2, -lse_log2[col]));
        }
        sm.pt()[t * 128 + thread] = make_float4(s[t][0], s[t][1], s[t][2], s[t][3]);
      }
      mbar_arrive(sm.pt_full());
      pack_k16_steps<Element>(x, s);
      wgmma_fence();
      wgmma_rs_mn_major<Cfg::kDvSlice, kBM / 16, L::kRow>(acc, x, sm.d_o(slot) + slice_panel,
                                                 L::kQPanelBytes);
    } else {
      // dS^T = P^T (dP^T - D), P^T as the first consumer's thread of the same index holds it.
      mbar_wait(sm.pt_full(), j & 1);
#pragma unroll
      for (int t = 0; t < kQT; ++t) {
        const float4 pt = sm.pt()[t * 128 + thread];
        const float pe[4] = {pt.x, pt.y, pt.z, pt.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = t * 8 + (lane % 4) * 2 + e % 2;
          s[t][e] = pe[e] * (s[t][e] - d_rows[col]);
        }
      }
      if constexpr (kDq == DqAdds::kNone) mbar_arrive(sm.pt_empty());
      pack_k16_steps<Element>(x, s);
      if constexpr (kDq != DqAdds::kNone) {
        store_ds_transposed(sm.ds(j % L::kDsBuffers), L::kDsPanelBytes, x, warp * 16 + lane / 4,
                            lane);
        fence_proxy_async_shared();
      }
    }
    if constexpr (kDq != DqAdds::kNone) {
      // The second's dS^T in the buffer, read by both dQ products of the step; those of two
      // steps ago are done (see consume).
      named_sync(kDsReadyBarrier, 256);
    }
    if constexpr (!kFirst) {
      wgmma_fence();
      wgmma_rs_mn_major<Cfg::kDkSlice, kBM / 16, L::kRow>(acc, x, sm.q(slot) + slice_panel,
                                                 L::kQPanelBytes);
    }
    if constexpr (kDq == DqAdds::kNone) {
      wgmma_commit();
      wgmma_wait<0>();
      mbar_arrive(sm.empty(slot));
    } else {
      const int share_col0 = kFirst ? 0 : L::kDqCols0;
      const DqShare share =
          dq_share<Cfg, kDq>(p, kb, j, m0, m0, Cfg::kDkSlice, share_col0, false, c);
      const u32 k_cols = sm.k_cols(share_col0);
      const DqStage stage{sm.dq_stage(c), sm.dq_staged(c), sm.dq_free(c), sm.dq_mailbox(c)};
      finish_step_with_dq<Cfg, kDq, kFirst ? L::kDqCols0 : L::kDqCols1, kFirst ? 0 : L::kDqCols0>(
          sm.ds(j % L::kDsBuffers), k_cols, sm.empty(slot), stage, c, j, share, warp, lane);
    }
  }
  // ---- epilogue: every key row of the block, zeros for keys no query sees; dV's, or dK's.
  const Sequence& seq = kb.seq;
  const int key = kb.n0 + warp * 16;
  const long long seq_stride = kFirst ? p.dv_seq_stride : p.dk_seq_stride;
  const long long row0 = Cfg::kVarlen ? seq.k_start * seq_stride
                                      : kb.batch * (kFirst ? p.dv_batch_stride : p.dk_batch_stride);
  Storage* rows = static_cast<Storage*>(kFirst ? p.d_v : p.d_k) + row0 +
                  kb.kv_head * (kFirst ? p.dv_head_stride : p.dk_head_stride) + key * seq_stride +
                  col0;
  store_scaled_rows<Cfg>(acc, kFirst ? 1.f : p.softmax_scale, rows, seq_stride, key, seq.seqlen_k,
                         cols, lane);
}

}  // namespace sm90_bwd
}  // namespace fj
