// The sm90 dK/dV kernel's dQ variants (kernels/bwd_dkdv_sm90.cuh): dS^T into shared memory,
// each step's dQ product, staged and added to dq_accum, and the ordered variant's dQ writer.
#pragma once

#include "bwd_dkdv_sm90_layout.cuh"

namespace fj {
namespace sm90_bwd {

// The dQ variant: this consumer's dS^T (x, packed for the dK product: k16 step t holds query
// tiles 2t and 2t+1 of key rows `row` and row + 8) into the dS^T tile at `ds`: panels of 64
// queries `panel_bytes` apart, rows of 128 bytes whose 16-byte chunk q lies at chunk
// q ^ (row % 8), TMA's 128-byte swizzle.
template <int kSteps>
__device__ __forceinline__ void store_ds_transposed(u32 ds, int panel_bytes,
                                                    const u32 (&x)[kSteps][4], int row, int lane) {
#pragma unroll
  for (int t = 0; t < kSteps; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = row + (i % 2) * 8, chunk = 2 * t + i / 2;
      st_shared_u32(ds + chunk / 8 * panel_bytes + r * 128 + ((chunk % 8 ^ (r % 8)) << 4) +
                        (lane % 4) * 4,
                    static_cast<int>(x[t][i]));
    }
}

// Where a consumer's dQ tile of a step goes: its share of a dq_accum block, whether there is
// anything to add (`at` null: past the padded head dim, the last split's share, or at 128
// rows a step past the sequence, where a block no sequence owns may not exist), and in the
// ordered variant the share's counter and this key block's turn.
struct DqShare {
  float* at;
  int* turns;
  int turn;
};

// A consumer's share of step j: block `dq_m0` of dq_accum (blocks `block_cols` wide), its
// columns from share_col0, and in the ordered variant counter `counter` of the block and this
// key block's turn for the tile at m0. Where consumers split the step's rows (`rows_split`),
// the second's block may lie past the sequence.
template <class Cfg, DqAdds kDq>
__device__ __forceinline__ DqShare dq_share(const BwdParams& p, const KeyBlock<Cfg>& kb, int j,
                                            int m0, int dq_m0, int block_cols, int share_col0,
                                            bool rows_split, int counter) {
  const long long block = dq_tile_index<Cfg::kVarlen>(p, kb.seq, kb.batch, kb.head(p, j), dq_m0);
  const bool adds = share_col0 < Cfg::kDqkPad && (!rows_split || dq_m0 < kb.seq.seqlen_q);
  DqShare share{nullptr, nullptr, 0};
  if (adds) share.at = p.dq_accum + (block * block_cols + share_col0) * kDqTileRows;
  if constexpr (kDq == DqAdds::kKeyOrder) {
    share.turns = p.dq_turns + block * kDqTurnsPerBlock + counter;
    share.turn = kb.dq_turn(m0);
  }
  return share;
}

// Consumer c's staged dQ tile and, in key-block order, its mbarriers and mailbox.
struct DqStage {
  u32 tile, staged, free, mailbox;
};

// dQ columns kCol0 .. kCol0+N of the split (K's from `k` on) of 64 of the tile's rows = dS K
// over the CTA's keys: wgmma SS from the dS^T panel `ds` and K, both MN-major, one commit group.
// Where the layout runs live widths, columns past the head dim's are zeros, not products of
// padding (kDkValid - kCol0 <= 0: the whole share).
template <class Cfg, DqAdds kDq, int N, int kCol0>
__device__ __forceinline__ void issue_dq_product(float (&acc)[N / 8][4], u32 ds, u32 k) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  wgmma_fence();  // every product opens with one, or ptxas inserts it (C7519)
  wgmma_ss_mn_major_live<N, L::kDkValid - kCol0, Cfg::kBlockN / 16, L::kDsRow, L::kRow>(
      acc, ds, L::kDsPanelBytes, k, L::kKPanelBytes);
  wgmma_commit();
}

// A finished dQ product into the stage in its block's order, once the dQ writer has read the
// last one (the wait at step j > 0); the consumer leaves the block (and in key-block order its
// counter and turn) in the mailbox and arrives at `staged`, without waiting: the writer adds
// the tile to dq_accum, as FlashAttention-3's dQ writer warp does.
template <class Cfg, DqAdds kDq, int N, int kCol0>
__device__ __forceinline__ void stage_dq(const float (&acc)[N / 8][4], const DqStage& stage, int c,
                                         int j, const DqShare& share, int warp, int lane) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  if (j > 0) mbar_wait(stage.free, (j - 1) & 1);
#pragma unroll
  for (int half = 0; half < 2; ++half)
#pragma unroll
    for (int t = 0; t < N / 8; ++t) {
      const int row = warp * 16 + lane / 4 + half * 8, col = kCol0 + t * 8 + (lane % 4) * 2;
      st_shared_f32x2(stage.tile + 4 * (dq_block_offset<Cfg::kDkSlice, L::kDqCols0>(row, col) -
                                        kCol0 * kDqTileRows),
                      acc[t][half * 2], acc[t][half * 2 + 1]);
    }
  fence_proxy_async_shared();
  if (warp == 0 && lane == 0) {
    st_shared_u64(stage.mailbox, reinterpret_cast<u64>(share.at));
    if constexpr (kDq == DqAdds::kKeyOrder) {
      st_shared_u64(stage.mailbox + 8, reinterpret_cast<u64>(share.turns));
      st_shared_u32(stage.mailbox + 16, share.turn);
    }
  }
  mbar_arrive(stage.staged);
}

// The paired consumers' end of a step, after their dV or dK product was issued: the dQ
// product, the slot released once both are done, then the tile staged.
template <class Cfg, DqAdds kDq, int N, int kCol0>
__device__ __forceinline__ void finish_step_with_dq(u32 ds, u32 k, u32 empty,
                                                    const DqStage& stage, int c, int j,
                                                    const DqShare& share, int warp, int lane) {
  float acc[N / 8][4];
  issue_dq_product<Cfg, kDq, N, kCol0>(acc, ds, k);
  wgmma_wait<0>();
  mbar_arrive(empty);
  stage_dq<Cfg, kDq, N, kCol0>(acc, stage, c, j, share, warp, lane);
}

// The 128-key consumers' end of a step, dV's product in flight: the dQ product, then dK's
// (from dS^T packed in x and Q's panel `q`) once dV's is done with the ring slot's dO, and dQ's
// tile staged while dK's runs. Returns with every product done.
template <class Cfg, DqAdds kDq, int N, int kCol0, class DkAcc, class Packed>
__device__ __forceinline__ void dq_then_dk(DkAcc& acc_dk, const Packed& x, u32 q, u32 ds, u32 k,
                                           const DqStage& stage, int c, int j,
                                           const DqShare& share, int warp, int lane) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  float acc[N / 8][4];
  issue_dq_product<Cfg, kDq, N, kCol0>(acc, ds, k);
  wgmma_wait<1>();  // dV's product is done
  wgmma_fence();
  wgmma_rs_mn_major_live<Cfg::kDkSlice, L::kDkValid, Cfg::kBlockM / 16, L::kRow>(acc_dk, x, q,
                                                                             L::kQPanelBytes);
  wgmma_commit();
  wgmma_wait<1>();  // dQ's product is done
  stage_dq<Cfg, kDq, N, kCol0>(acc, stage, c, j, share, warp, lane);
  wgmma_wait<0>();
}

// The dQ variants' dQ writer (the first lane of the producer's second warp): each step, each
// consumer's staged tile added to dq_accum, in key-block order once the key blocks before this
// one have added theirs. Both consumers' adds of a step are in flight together, and their
// stages are freed once read, before the adds land: at 64 query rows a step, one add at a
// time, each waited for, took longer than the step (det / default 0.71 at d72, bench/NOTES.md
// entry 33). In any order only the reads are waited for, and the adds land by the kernel's end.
template <class Cfg, DqAdds kDq>
__device__ __forceinline__ void write_dq(const Smem<Cfg, kDq>& sm, int steps) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  constexpr bool kOrdered = kDq == DqAdds::kKeyOrder;
  constexpr int kCols0 = L::kDqRowsSplit ? Cfg::kDkSlice : L::kDqCols0;
  constexpr int kCols1 = L::kDqRowsSplit ? Cfg::kDkSlice : L::kDqCols1;
#pragma unroll 1
  for (int j = 0; j < steps; ++j) {
    int* turns[2] = {nullptr, nullptr};
    int turn[2] = {0, 0};
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      mbar_wait(sm.dq_staged(c), j & 1);
      const u32 mailbox = sm.dq_mailbox(c);
      float* at = reinterpret_cast<float*>(ld_shared_u64(mailbox));
      if (at == nullptr) continue;
      if constexpr (kOrdered) {
        turns[c] = reinterpret_cast<int*>(ld_shared_u64(mailbox + 8));
        turn[c] = ld_shared_u32(mailbox + 16);
        while (ld_acquire_gpu(turns[c]) != turn[c]) {
        }
        fence_proxy_async_global();  // the earlier adds, before this one's reads
      }
      bulk_reduce_add_f32(at, sm.dq_stage(c), kDqTileRows * (c == 0 ? kCols0 : kCols1) * 4);
      bulk_commit();
    }
    bulk_wait_read<0>();
    mbar_arrive(sm.dq_free(0));
    mbar_arrive(sm.dq_free(1));
    if constexpr (kOrdered) {
      bulk_wait<0>();
      fence_proxy_async_global();  // the adds, before the releases
#pragma unroll
      for (int c = 0; c < 2; ++c)
        if (turns[c] != nullptr) st_release_gpu(turns[c], turn[c] + 1);
    }
  }
  // The stages live until the last adds have read them (and the kernel's end waits for this
  // thread).
  if constexpr (!kOrdered) bulk_wait<0>();
}

}  // namespace sm90_bwd
}  // namespace fj
