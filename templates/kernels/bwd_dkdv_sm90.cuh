// The backward's dK/dV kernel for sm_90a: warp-specialised, TMA + mbarrier + wgmma, and
// deterministic by construction like the sm80 kernel (one CTA owns its keys' dK and dV, walks
// the query heads of the GQA group and their query tiles in a fixed order, no atomics).
//
// A CTA is 128 keys of one (batch, kv head) and three warp groups:
//   - warp group 0, the producer, gives most of its registers away; its first warp loads K and
//     V once (TMA, the kv_full barrier), then per step the Q and dO tiles of kBlockM query rows
//     into a kStages-deep ring (one lane issues TMA; every lane writes the rows' LSE, in the
//     log2 domain, and D into the slot), each slot guarded by a "full" and an "empty" mbarrier.
//   - warp groups 1 and 2, the consumers, own 64 keys each, so they hold the scores transposed
//     (wgmma M = keys, N = the tile's query rows). Per step:
//       S^T = K Q^T and dP^T = V dO^T   (wgmma SS, both K-major in 128-byte swizzled panels)
//       P^T = exp2(scale_log2 S^T - LSE_log2), dV += P^T dO   (RS: P^T from the S registers)
//       dS^T = P^T (dP^T - D),             dK += dS^T Q      (RS; Q and dO read MN-major)
//     dP^T is in flight while P^T is computed, and dV's product while dS^T is.
// Wide heads split the output columns over kDvSplits CTAs per key block, as in the sm80
// kernel: split s accumulates dK columns s*kDkSlice.. and dV columns s*kDvSlice.. (64-column
// panels), recomputing S^T and dP^T over the whole head dims.
//
// The dQ-accumulating variant (bwd_dkdv_dq_sm90, not deterministic) also computes dQ, so that
// no separate dQ kernel recomputes S and dP: 5 products a step instead of 7 over both kernels.
// Both consumers write their dS^T to shared memory (a 128-key x kBlockM-query tile, two
// buffers), meet at a named barrier, and each computes its part of dQ = dS K (wgmma SS, both
// MN-major): at 64 query rows a step its share of the split's dQ columns, at 128 (head dims
// up to 64, FlashAttention-3's tile there) 64 of the rows and every column. It stages that
// tile in shared memory in the order its registers hold it, and one thread adds the whole
// tile to its block of the fp32 dq_accum with one bulk reduction: reductions from registers
// (red.global) took as long again as the products, and one bulk reduction a row took longer
// still. bwd_dq_convert reads the blocks back in that order and scales them into dQ.
//
// Where one consumer cannot hold its keys' dK and dV beside S^T and dP^T (qk + v past about
// 256 columns), the dQ variants take 64 keys a CTA and pair the consumers on them instead of
// splitting the columns over CTAs that each recompute S^T and dP^T (and dQ's kernel, both):
// the first computes S^T, P^T and dV, and hands P^T to the second through shared memory; the
// second computes dP^T, dS^T and dK. Each then computes its share of dQ as above
// (consume_paired): five products a step and no recomputation, FlashAttention-3's tiles at
// these head dims (64 x 80 or 96 there, its warp groups split dK's and dV's columns).
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
// kBlockM (queries a step), kBlockN (keys a CTA: 128, or 64 paired), kStages, kVarlen and the
// causal and window constants (block masks take the sm80 kernel).
#pragma once

#include "../arch/sm90.cuh"
#include "../attn/dq_accum.cuh"
#include "../attn/epilogue.cuh"
#include "../attn/mask.cuh"
#include "../attn/sequence.cuh"
#include "../tile/budgets.cuh"
#include "../tile/element.cuh"
#include "../tile/wgmma_tiles.cuh"
#include "bwd_params.cuh"

namespace fj {

// What the dK/dV kernel does with dQ: nothing (the dQ kernel computes it), add its tiles to
// dq_accum in whatever order the CTAs reach them, or in key-block order.
enum class DqAdds { kNone, kAnyOrder, kKeyOrder };

template <class Cfg, DqAdds kDq>
struct Sm90BwdDkDvLayoutOf {
  using Element = typename Cfg::Element;
  static constexpr bool kAccumulateDq = kDq != DqAdds::kNone;
  static constexpr int kThreads = 384;      // producer + two consumer warp groups
  static constexpr int kConsumerThreads = 256;  // the two consumer warp groups
  static constexpr int kConsumerKeys = 64;  // wgmma M: keys per consumer
  // 64 keys a CTA: both consumers on the same keys, in the roles the top describes.
  static constexpr bool kPaired = Cfg::kBlockN == budget::kBwdDkDvSm90PairedKeys;
  static constexpr int kQkPanels = budget::panels(Cfg::kDqkPad, Element::kBytes);  // K's
  static constexpr int kVPanels = budget::panels(Cfg::kDvPad, Element::kBytes);    // V's
  // Q's and dO's: every split's slice lies inside the tile, its panels past the head dim
  // zeros (TMA fills them), so the last split's wgmma N never reads past the tile.
  static constexpr int kQPanels = budget::panels(
      budget::bwd_dkdv_sm90_tile_cols(Cfg::kDqkPad, Cfg::kDkSlice, Cfg::kDvSplits), Element::kBytes);
  static constexpr int kDoPanels = budget::panels(
      budget::bwd_dkdv_sm90_tile_cols(Cfg::kDvPad, Cfg::kDvSlice, Cfg::kDvSplits), Element::kBytes);
  static constexpr int kRow = budget::kPanelRowBytes;
  static constexpr int kKPanelBytes = Cfg::kBlockN * kRow;  // one 64-column panel of K or V
  static constexpr int kQPanelBytes = Cfg::kBlockM * kRow;  // of a Q or dO tile
  static constexpr int kKBytes = kQkPanels * kKPanelBytes;
  static constexpr int kVBytes = kVPanels * kKPanelBytes;
  static constexpr int kQBytes = kQPanels * kQPanelBytes;  // one ring slot's Q
  static constexpr int kDoBytes = kDoPanels * kQPanelBytes;
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKOffset + kKBytes;
  static constexpr int kQOffset = kVOffset + kVBytes;
  static constexpr int kDoOffset = kQOffset + Cfg::kStages * kQBytes;
  // The dQ variant's dS^T tiles, kBlockN key rows of kBlockM queries in panels of 64 (one
  // 128-byte row each), and its consumers' staged dQ tiles.
  static constexpr int kDsBuffers = kAccumulateDq ? budget::kBwdDkDvSm90DsBuffers : 0;
  static constexpr int kDsBytes = Cfg::kBlockN * Cfg::kBlockM * Element::kBytes;
  static constexpr int kDsPanelBytes = Cfg::kBlockN * kRow;
  static constexpr int kDsOffset = kDoOffset + Cfg::kStages * kDoBytes;
  // Paired consumers' P^T (fp32, in the order of the first's registers), then its mbarrier.
  static constexpr int kPtOffset = kDsOffset + kDsBuffers * kDsBytes;
  static constexpr int kPtBytes = budget::bwd_dkdv_sm90_pt_bytes(Cfg::kBlockM, Cfg::kBlockN);
  static constexpr int kDqStage0Bytes =
      kAccumulateDq ? budget::bwd_dkdv_sm90_dq_stage_bytes(Cfg::kDkSlice, Cfg::kBlockM, 0) : 0;
  static constexpr int kDqStage1Bytes =
      kAccumulateDq ? budget::bwd_dkdv_sm90_dq_stage_bytes(Cfg::kDkSlice, Cfg::kBlockM, 1) : 0;
  static constexpr int kDqStageOffset = kPtOffset + kPtBytes;
  // The ordered variant's mailboxes, one a consumer: its "staged" and "free" mbarriers, then
  // the staged tile's block (null: nothing to add), its counter and the turn.
  static constexpr int kDqMailboxOffset = kDqStageOffset + kDqStage0Bytes + kDqStage1Bytes;
  static constexpr int kDqMailboxBytes = kDq == DqAdds::kKeyOrder ? budget::kDqMailboxBytes : 0;
  static constexpr int kRowsOffset = kDqMailboxOffset + 2 * kDqMailboxBytes;  // LSE, D per slot
  static constexpr int kBarOffset = kRowsOffset + Cfg::kStages * Cfg::kBlockM * 2 * 4;
  static constexpr int kSharedBytes = budget::bwd_dkdv_sm90_shared_bytes(
      Element::kBytes, Cfg::kDqkPad, Cfg::kDvPad, Cfg::kDkSlice, Cfg::kDvSlice, Cfg::kDvSplits,
      Cfg::kBlockM, Cfg::kBlockN, Cfg::kStages,
      kAccumulateDq ? budget::bwd_dkdv_sm90_dq_bytes(Element::kBytes, Cfg::kDkSlice, Cfg::kBlockM,
                                                     Cfg::kBlockN, kDq == DqAdds::kKeyOrder)
                    : 0);
  static_assert(kSharedBytes == kBarOffset + budget::bwd_sm90_barrier_bytes(Cfg::kStages) + 1024,
                "the budget holds K, V, the ring, the dS^T and dQ tiles, the rows' LSE and D, "
                "the barriers and the alignment slack");
  // The two consumers' shares of the split's kDkSlice dQ columns at 64 rows a step: a share
  // lies inside one 64-column panel of K or starts on one (an MN-major operand's columns
  // cannot cross a panel edge mid-panel). At 128 rows each takes 64 rows, every column.
  static constexpr bool kDqRowsSplit = budget::bwd_dkdv_sm90_dq_rows_split(Cfg::kBlockM);
  static constexpr int kDqCols0 = budget::bwd_dkdv_sm90_dq_cols0(Cfg::kDkSlice);
  static constexpr int kDqCols1 = Cfg::kDkSlice - kDqCols0;
  static_assert(kDqTileRows * Element::kBytes == kRow, "dS^T panels of 64 queries, dQ's wgmma M");
  static_assert(!kAccumulateDq || Cfg::kBlockM == kDqTileRows ||
                    (kDqRowsSplit && Cfg::kDkSlice <= 64),
                "a step is one block of dq_accum, or two (one a consumer, whose dQ product's "
                "columns lie in one panel of K)");

  // dV's product runs while dS^T is computed, except at 128-row steps of head dims up to 64
  // (budget::bwd_dkdv_sm90_dv_after_ds): there the step waits for S^T and dP^T both and
  // issues dV's product with dK's once dS^T is computed, FlashAttention-3's order, with
  // nothing in flight while S^T and dP^T are used.
  static constexpr bool kDvDuringDs = !budget::bwd_dkdv_sm90_dv_after_ds(
      Cfg::kDkSlice, Cfg::kDvSlice, Cfg::kDvSplits, Cfg::kBlockM);
  static_assert((kPaired ? budget::bwd_dkdv_sm90_paired_registers(Cfg::kDkSlice, Cfg::kDvSlice,
                                                                  Cfg::kBlockM)
                         : budget::bwd_dkdv_sm90_step_registers(Cfg::kDkSlice, Cfg::kDvSlice,
                                                                Cfg::kDvSplits, Cfg::kBlockM)) <=
                    budget::kBwdDkDvSm90MaxAccumulatorRegisters,
                "a consumer's accumulators within its register budget");
  static_assert(!kPaired || (kAccumulateDq && Cfg::kDvSplits == 1 && Cfg::kBlockM == kDqTileRows),
                "paired consumers accumulate dQ, over whole columns, 64 query rows a step");

  static constexpr int kQTiles = Cfg::kBlockM / 8;  // n8 tiles of S^T (query columns)
  static constexpr int kDkTiles = Cfg::kDkSlice / 8;
  static constexpr int kDvTiles = Cfg::kDvSlice / 8;

  static_assert(Cfg::kBlockN == 2 * kConsumerKeys || kPaired,
                "two consumer warp groups of 64 keys, or both on the same 64");
  static_assert(Cfg::kBlockM % 16 == 0 && Cfg::kBlockM <= 256, "wgmma N of S^T, k16 steps");
  static_assert(Cfg::kDkSlice % 16 == 0 && Cfg::kDkSlice <= 256 && Cfg::kDvSlice % 16 == 0 &&
                    Cfg::kDvSlice <= 256,
                "wgmma N of dK and dV");
  static_assert(Cfg::kDvSplits == 1 || (Cfg::kDkSlice % 64 == 0 && Cfg::kDvSlice % 64 == 0),
                "split slices start on a panel");
  static_assert(Cfg::kStages == 1 || Cfg::kStages == 2, "one or two ring slots");
  static_assert(Element::kBytes == 2 && Element::kMmaK == 16, "k16 steps of 16-bit elements");
};

template <class Cfg>
using Sm90BwdDkDvLayout = Sm90BwdDkDvLayoutOf<Cfg, DqAdds::kNone>;
template <class Cfg>
using Sm90BwdDkDvDqLayout = Sm90BwdDkDvLayoutOf<Cfg, DqAdds::kAnyOrder>;
template <class Cfg>
using Sm90BwdDkDvDqOrderedLayout = Sm90BwdDkDvLayoutOf<Cfg, DqAdds::kKeyOrder>;

namespace sm90_bwd {

// Named barriers (id 0 is __syncthreads'): both consumers' dS^T tiles are in shared memory;
// consumer c's dQ tile is staged (id kDqStagedBarrier + c). The ordered variant hands its
// staged tiles to the dQ writer through mbarriers instead (its mailboxes).
constexpr u32 kDsReadyBarrier = 1;
constexpr u32 kDqStagedBarrier = 2;

template <class Cfg, DqAdds kDq>
struct Smem {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  u32 base;
  unsigned char* generic;  // the same address, for the rows' plain loads and stores
  __device__ u32 k() const { return base + L::kKOffset; }
  __device__ u32 v() const { return base + L::kVOffset; }
  __device__ u32 q(int slot) const { return base + L::kQOffset + slot * L::kQBytes; }
  __device__ u32 d_o(int slot) const { return base + L::kDoOffset + slot * L::kDoBytes; }
  __device__ u32 ds(int buffer) const { return base + L::kDsOffset + buffer * L::kDsBytes; }
  __device__ u32 dq_stage(int consumer) const {
    return base + L::kDqStageOffset + consumer * L::kDqStage0Bytes;
  }
  // Paired consumers: P^T as float4s, 128 threads' apart; the mbarrier that says it is there.
  __device__ float4* pt() const { return reinterpret_cast<float4*>(generic + L::kPtOffset); }
  __device__ u32 pt_full() const { return base + L::kPtOffset + L::kPtBytes - 16; }
  // Consumer c's tile is staged (its 128 threads arrive) / its stage is free (the writer).
  __device__ u32 dq_staged(int consumer) const {
    return base + L::kDqMailboxOffset + consumer * L::kDqMailboxBytes;
  }
  __device__ u32 dq_free(int consumer) const { return dq_staged(consumer) + 8; }
  __device__ u32 dq_mailbox(int consumer) const { return dq_staged(consumer) + 16; }
  // The slot's kBlockM LSE values (log2 domain), then its kBlockM D values.
  __device__ float* rows(int slot) const {
    return reinterpret_cast<float*>(generic + L::kRowsOffset) + slot * 2 * Cfg::kBlockM;
  }
  // The same as a shared-memory address (the producer's: a generic pointer takes two of its
  // 24 registers).
  __device__ u32 rows_at(int slot) const { return base + L::kRowsOffset + slot * 8 * Cfg::kBlockM; }
  __device__ u32 kv_full() const { return base + L::kBarOffset; }
  __device__ u32 full(int slot) const { return base + L::kBarOffset + 8 * (1 + slot); }
  __device__ u32 empty(int slot) const {
    return base + L::kBarOffset + 8 * (1 + Cfg::kStages + slot);
  }
};

// The CTA's keys and its steps: every query head of the group, and per head the query tiles
// whose rows see a key of the block (causal and window bands). The ordered variant counts key
// blocks down the grid under bands (see the top).
template <class Cfg>
struct KeyBlock {
  int n0, kv_head, batch, split;
  Sequence seq;
  int tile0, tiles;

  __device__ KeyBlock(const BwdParams& p, bool keys_down)
      : n0((keys_down ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * Cfg::kBlockN),
        kv_head(blockIdx.y),
        batch(blockIdx.z / Cfg::kDvSplits),
        split(blockIdx.z % Cfg::kDvSplits),
        seq(sequence_of<Cfg::kVarlen>(p, batch)) {
    const KeyRange rows = visible_queries<Cfg>(n0, Cfg::kBlockN, seq.seqlen_q, seq.diag);
    tile0 = rows.begin / Cfg::kBlockM;
    tiles = rows.end > rows.begin ? (rows.end + Cfg::kBlockM - 1) / Cfg::kBlockM - tile0 : 0;
  }
  __device__ int steps(const BwdParams& p) const { return tiles * p.heads_per_kv; }
  __device__ int head(const BwdParams& p, int step) const {
    return kv_head * p.heads_per_kv + step / tiles;
  }
  __device__ int m0(int step) const { return (tile0 + step % tiles) * Cfg::kBlockM; }

  // This block's place among the key blocks that add to the query tile at m0, in the ordered
  // variant's order. Under a band the blocks that see the tile run from some first one up to
  // the last whose first query row (visible_queries) lies before the tile's end.
  __device__ int dq_turn(int m0) const {
    const int block = n0 / Cfg::kBlockN;
    if constexpr (!Cfg::kCausal && !Cfg::kWindow) return block;
    const int reach = seq.diag + (Cfg::kCausal ? 0 : Cfg::kWindowRight);
    const int blocks = (seq.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;
    const int last = min(blocks, (m0 + Cfg::kBlockM + reach + Cfg::kBlockN - 1) / Cfg::kBlockN) - 1;
    return last - block;
  }
};

// The producer's first warp.
template <class Cfg, DqAdds kDq>
__device__ __forceinline__ void produce(const Smem<Cfg, kDq>& sm, const BwdParams& p,
                                        const KeyBlock<Cfg>& kb, const TmaDesc* tm_q,
                                        const TmaDesc* tm_k, const TmaDesc* tm_v,
                                        const TmaDesc* tm_do) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  constexpr int kPanelCols = L::kRow / Cfg::Element::kBytes;  // TMA box columns
  const Sequence& seq = kb.seq;
  const int lane = threadIdx.x % 32;
  if (lane == 0) {
    mbar_arrive_expect_tx(sm.kv_full(), L::kKBytes + L::kVBytes);
#pragma unroll 1
    for (int panel = 0; panel < L::kQkPanels; ++panel)
      tma_load_4d(sm.k() + panel * L::kKPanelBytes, tm_k, panel * kPanelCols, seq.k_start + kb.n0,
                  kb.kv_head, seq.tma_batch, sm.kv_full());
#pragma unroll 1
    for (int panel = 0; panel < L::kVPanels; ++panel)
      tma_load_4d(sm.v() + panel * L::kKPanelBytes, tm_v, panel * kPanelCols, seq.k_start + kb.n0,
                  kb.kv_head, seq.tma_batch, sm.kv_full());
  }
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
    const int slot = j % Cfg::kStages;
    mbar_wait(sm.empty(slot), ((j / Cfg::kStages) & 1) ^ 1);  // the first pass finds it free
    // The rows' LSE in the log2 domain and D (0 past the sequence end).
    const long long row0 = lse_row0<Cfg::kVarlen>(p, seq, kb.batch, head) + m0;
    const u32 rows = sm.rows_at(slot);
#pragma unroll 1
    for (int r = lane; r < Cfg::kBlockM; r += 32) {
      const bool valid = m0 + r < seq.seqlen_q;
      st_shared_u32(rows + 4 * r, __float_as_int(lse_log2_of_row(p.lse, row0 + r, valid)));
      st_shared_u32(rows + 4 * (Cfg::kBlockM + r),
                    __float_as_int(valid ? p.d_rows[row0 + r] : 0.f));
    }
    if (lane != 0) {
      mbar_arrive(sm.full(slot));  // this lane's rows are written
      continue;
    }
    mbar_arrive_expect_tx(sm.full(slot), L::kQBytes + L::kDoBytes);
#pragma unroll 1
    for (int panel = 0; panel < L::kQPanels; ++panel)
      tma_load_4d(sm.q(slot) + panel * L::kQPanelBytes, tm_q, panel * kPanelCols,
                  seq.q_start + m0, head, seq.tma_batch, sm.full(slot));
#pragma unroll 1
    for (int panel = 0; panel < L::kDoPanels; ++panel)
      tma_load_4d(sm.d_o(slot) + panel * L::kQPanelBytes, tm_do, panel * kPanelCols,
                  seq.q_start + m0, head, seq.tma_batch, sm.full(slot));
  }
}

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

// The dQ variant's end of a step, after the dK product was issued: dQ columns kCol0 ..
// kCol0+N of the split (K's from `k` on) of 64 of the tile's rows = dS K over the CTA's keys
// (wgmma SS from the dS^T panel `ds` and K, both MN-major). Once the products are done and
// the slot is released, the tile goes to `stage` in its block's order. In any order, the warp
// group's first thread then adds it to dq_accum with one bulk reduction, and the next step
// writes `stage` only after that thread has waited for this read (at the dS^T barrier). In
// key-block order the dQ writer adds it, and frees the stage (the wait at step j > 0): the
// consumer leaves the block in the mailbox and arrives at `staged`.
template <class Cfg, DqAdds kDq, int N, int kCol0>
__device__ __forceinline__ void finish_step_with_dq(u32 ds, u32 k, u32 empty, u32 stage,
                                                    u32 staged, u32 free, u32 mailbox, int c,
                                                    int j, const DqShare& share, int warp,
                                                    int lane) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  float acc[N / 8][4];
  wgmma_fence();  // every product opens with one, or ptxas inserts it (C7519)
  wgmma_ss_mn_major<N, Cfg::kBlockN / 16>(acc, ds, L::kDsPanelBytes, k, L::kKPanelBytes);
  wgmma_commit();
  wgmma_wait<0>();
  mbar_arrive(empty);
  if (kDq == DqAdds::kKeyOrder && j > 0) mbar_wait(free, (j - 1) & 1);
#pragma unroll
  for (int half = 0; half < 2; ++half)
#pragma unroll
    for (int t = 0; t < N / 8; ++t) {
      const int row = warp * 16 + lane / 4 + half * 8, col = kCol0 + t * 8 + (lane % 4) * 2;
      st_shared_f32x2(
          stage + 4 * (dq_block_offset<Cfg::kDkSlice, L::kDqCols0>(row, col) - kCol0 * kDqTileRows),
          acc[t][half * 2], acc[t][half * 2 + 1]);
    }
  fence_proxy_async_shared();
  if constexpr (kDq == DqAdds::kKeyOrder) {
    if (warp == 0 && lane == 0) {
      st_shared_u64(mailbox, reinterpret_cast<u64>(share.at));
      st_shared_u64(mailbox + 8, reinterpret_cast<u64>(share.turns));
      st_shared_u32(mailbox + 16, share.turn);
    }
    mbar_arrive(staged);
  } else {
    named_sync(kDqStagedBarrier + c, 128);
    if (warp != 0 || lane != 0) return;
    if (share.at != nullptr) bulk_reduce_add_f32(share.at, stage, kDqTileRows * N * 4);
    bulk_commit();
  }
}

// The ordered variant's dQ writer (the first lane of the producer's second warp): each step,
// each consumer's staged tile, added once the key blocks before this one in the order have
// added theirs. Both consumers' adds of a step are in flight together, and their stages are
// freed once read, before the adds land: at 64 query rows a step, one add at a time, each
// waited for, took longer than the step (det / default 0.71 at d72, bench/NOTES.md entry 33).
template <class Cfg>
__device__ __forceinline__ void write_dq(const Smem<Cfg, DqAdds::kKeyOrder>& sm, int steps) {
  using L = Sm90BwdDkDvDqOrderedLayout<Cfg>;
  constexpr int kCols0 = L::kDqRowsSplit ? Cfg::kDkSlice : L::kDqCols0;
  constexpr int kCols1 = L::kDqRowsSplit ? Cfg::kDkSlice : L::kDqCols1;
#pragma unroll 1
  for (int j = 0; j < steps; ++j) {
    int* turns[2];
    int turn[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      mbar_wait(sm.dq_staged(c), j & 1);
      const u32 mailbox = sm.dq_mailbox(c);
      float* at = reinterpret_cast<float*>(ld_shared_u64(mailbox));
      turns[c] = at != nullptr ? reinterpret_cast<int*>(ld_shared_u64(mailbox + 8)) : nullptr;
      turn[c] = ld_shared_u32(mailbox + 16);
      if (at == nullptr) continue;
      while (ld_acquire_gpu(turns[c]) != turn[c]) {
      }
      fence_proxy_async_global();  // the earlier adds, before this one's reads
      bulk_reduce_add_f32(at, sm.dq_stage(c), kDqTileRows * (c == 0 ? kCols0 : kCols1) * 4);
      bulk_commit();
    }
    bulk_wait_read<0>();
    mbar_arrive(sm.dq_free(0));
    mbar_arrive(sm.dq_free(1));
    bulk_wait<0>();
    fence_proxy_async_global();  // the adds, before the releases
#pragma unroll
    for (int c = 0; c < 2; ++c)
      if (turns[c] != nullptr) st_release_gpu(turns[c], turn[c] + 1);
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
    wgmma_ss_k_major<kBM, Cfg::kDqkPad / 16>(s, k_rows, L::kKPanelBytes, sm.q(slot),
                                             L::kQPanelBytes);
    wgmma_commit();
    wgmma_ss_k_major<kBM, Cfg::kDvPad / 16>(dp, v_rows, L::kKPanelBytes, sm.d_o(slot),
                                            L::kQPanelBytes);
    wgmma_commit();
    wgmma_wait<L::kDvDuringDs ? 1 : 0>();  // S^T has landed (dP^T may be in flight)

    if (block_needs_mask<Cfg>(m0, kBM, key0, L::kConsumerKeys, kb.seq.seqlen_k, kb.seq.diag))
      mask_scores_transposed<Cfg, L::kAccumulateDq>(s, key0 + warp * 16 + lane / 4, m0,
                                                    kb.seq.diag, lane, kb.seq.seqlen_k);
    const float* lse_log2 = sm.rows(slot);
    const float* d_rows = lse_log2 + kBM;
    const u32 dv_panel = sm.d_o(slot) + dv_col0 / 64 * L::kQPanelBytes;
    // Element e of n8 tile t (query column `col` in this lane's registers): S^T into P^T, and
    // dP^T into dS^T, the same in either step order below.
    const auto to_p = [&](int t, int e) {
      const int col = t * 8 + (lane % 4) * 2 + e % 2;
      s[t][e] = exp2_approx(fmaf(s[t][e], p.scale_log2, -lse_log2[col]));
    };
    const auto to_ds = [&](int t, int e) {
      const int col = t * 8 + (lane % 4) * 2 + e % 2;
      dp[t][e] = s[t][e] * (dp[t][e] - d_rows[col]);
    };
    if constexpr (L::kDvDuringDs) {
#pragma unroll
      for (int t = 0; t < kQT; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) to_p(t, e);
      pack_k16_steps<Element>(x, s);
      if (dv_cols > 0) {
        wgmma_fence();
        wgmma_rs_mn_major<Cfg::kDvSlice, kBM / 16>(acc_dv, x, dv_panel, L::kQPanelBytes);
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
      }
    } else {
      // P^T and dS^T a k16 step at a time, each packed at once, so that S^T's and dP^T's
      // registers free as the pass goes; then dV's product (dK's follows).
#pragma unroll
      for (int t = 0; t < kQT; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          to_p(t, e);
          to_ds(t, e);
          if (t % 2 == 1 && e == 3) {
            pack_k16_step<Element>(xp[t / 2], s[t - 1], s[t]);
            pack_k16_step<Element>(x[t / 2], dp[t - 1], dp[t]);
          }
        }
      wgmma_fence();
      wgmma_rs_mn_major<Cfg::kDvSlice, kBM / 16>(acc_dv, xp, dv_panel, L::kQPanelBytes);
    }
    if (dk_cols > 0) {
      if constexpr (L::kAccumulateDq) {
        // Both consumers' dS^T in the buffer; the other's products of two steps ago, which
        // read it, are done (each passes here only after waiting for its own), and so are
        // the bulk reductions that read the staged dQ tiles of the step before (the dQ
        // writer's: at the stage's own barrier).
        const u32 ds = sm.ds(j % L::kDsBuffers);
        store_ds_transposed(ds, L::kDsPanelBytes, x, c * L::kConsumerKeys + warp * 16 + lane / 4,
                            lane);
        fence_proxy_async_shared();
        if (kDq == DqAdds::kAnyOrder && warp == 0 && lane == 0) bulk_wait_read<0>();
        named_sync(kDsReadyBarrier, 256);
      }
      wgmma_fence();
      wgmma_rs_mn_major<Cfg::kDkSlice, kBM / 16>(
          acc_dk, x, sm.q(slot) + dk_col0 / 64 * L::kQPanelBytes, L::kQPanelBytes);
      if constexpr (L::kAccumulateDq) {
        // This consumer's rows and columns of dQ; a block holds every split's shares,
        // kDqTileRows x their width each, and has a counter a consumer's share.
        const int dq_m0 = L::kDqRowsSplit ? m0 + c * kDqTileRows : m0;
        const int share_col0 = dk_col0 + (L::kDqRowsSplit || c == 0 ? 0 : L::kDqCols0);
        const long long block =
            dq_tile_index<Cfg::kVarlen>(p, kb.seq, kb.batch, kb.head(p, j), dq_m0);
        const bool adds =
            share_col0 < Cfg::kDqkPad && (!L::kDqRowsSplit || dq_m0 < kb.seq.seqlen_q);
        DqShare share{nullptr, nullptr, 0};
        if (adds)
          share.at = p.dq_accum +
                     (block * (Cfg::kDvSplits * Cfg::kDkSlice) + share_col0) * kDqTileRows;
        if constexpr (kDq == DqAdds::kKeyOrder) {
          share.turns = p.dq_turns + block * kDqTurnsPerBlock + (L::kDqRowsSplit ? 0 : c);
          share.turn = kb.dq_turn(m0);
        }
        const u32 ds = sm.ds(j % L::kDsBuffers);
        const u32 k_cols = sm.k() + share_col0 / 64 * L::kKPanelBytes + share_col0 % 64 * 2;
        const u32 stage = sm.dq_stage(c), staged = sm.dq_staged(c), free = sm.dq_free(c),
                  mailbox = sm.dq_mailbox(c);
        if constexpr (L::kDqRowsSplit)
          finish_step_with_dq<Cfg, kDq, Cfg::kDkSlice, 0>(ds + c * L::kDsPanelBytes, k_cols,
                                                          sm.empty(slot), stage, staged, free,
                                                          mailbox, c, j, share, warp, lane);
        else if (c == 0)
          finish_step_with_dq<Cfg, kDq, L::kDqCols0, 0>(ds, k_cols, sm.empty(slot), stage,
                                                        staged, free, mailbox, c, j, share,
                                                        warp, lane);
        else
          finish_step_with_dq<Cfg, kDq, L::kDqCols1, L::kDqCols0>(
              ds, k_cols, sm.empty(slot), stage, staged, free, mailbox, c, j, share, warp, lane);
        continue;
      }
      wgmma_commit();
    }
    wgmma_wait<0>();
    mbar_arrive(sm.empty(slot));
  }

  // The shared memory the bulk reductions read lives until they are done (the dQ writer
  // waits for its own).
  if constexpr (kDq == DqAdds::kAnyOrder)
    if (warp == 0 && lane == 0) bulk_wait<0>();

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

// Paired consumers (64 keys a CTA, the dQ variants at head dims whose dK and dV one consumer
// cannot hold), kFirst: S^T = K Q^T, P^T, dV += P^T dO, then the first share of dQ; the
// second: dP^T = V dO^T, dS^T from the first's P^T, dK += dS^T Q, then the other share. Each
// holds only its own accumulator of the block's 64 keys.
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
      wgmma_ss_k_major<kBM, Cfg::kDqkPad / 16>(s, sm.k(), L::kKPanelBytes, sm.q(slot),
                                               L::kQPanelBytes);
    else
      wgmma_ss_k_major<kBM, Cfg::kDvPad / 16>(s, sm.v(), L::kKPanelBytes, sm.d_o(slot),
                                              L::kQPanelBytes);
    wgmma_commit();
    wgmma_wait<0>();
    const float* lse_log2 = sm.rows(slot);
    const float* d_rows = lse_log2 + kBM;
    const u32 ds = sm.ds(j % L::kDsBuffers);
    if constexpr (kFirst) {
      if (block_needs_mask<Cfg>(m0, kBM, kb.n0, L::kConsumerKeys, kb.seq.seqlen_k, kb.seq.diag))
        mask_scores_transposed<Cfg, true>(s, kb.n0 + warp * 16 + lane / 4, m0, kb.seq.diag, lane,
                                          kb.seq.seqlen_k);
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
      wgmma_rs_mn_major<Cfg::kDvSlice, kBM / 16>(acc, x, sm.d_o(slot), L::kQPanelBytes);
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
      pack_k16_steps<Element>(x, s);
      store_ds_transposed(ds, L::kDsPanelBytes, x, warp * 16 + lane / 4, lane);
      fence_proxy_async_shared();
    }
    // The second's dS^T in the buffer, read by both dQ products of the step; those of two
    // steps ago are done, and so are the bulk reductions of the step before (see consume).
    if (kDq == DqAdds::kAnyOrder && warp == 0 && lane == 0) bulk_wait_read<0>();
    named_sync(kDsReadyBarrier, 256);
    if constexpr (!kFirst) {
      wgmma_fence();
      wgmma_rs_mn_major<Cfg::kDkSlice, kBM / 16>(acc, x, sm.q(slot), L::kQPanelBytes);
    }
    const long long block = dq_tile_index<Cfg::kVarlen>(p, kb.seq, kb.batch, kb.head(p, j), m0);
    const int share_col0 = kFirst ? 0 : L::kDqCols0;
    DqShare share{nullptr, nullptr, 0};
    if (share_col0 < Cfg::kDqkPad)
      share.at = p.dq_accum + (block * Cfg::kDkSlice + share_col0) * kDqTileRows;
    if constexpr (kDq == DqAdds::kKeyOrder) {
      share.turns = p.dq_turns + block * kDqTurnsPerBlock + c;
      share.turn = kb.dq_turn(m0);
    }
    const u32 k_cols = sm.k() + share_col0 / 64 * L::kKPanelBytes + share_col0 % 64 * 2;
    finish_step_with_dq<Cfg, kDq, kFirst ? L::kDqCols0 : L::kDqCols1, kFirst ? 0 : L::kDqCols0>(
        ds, k_cols, sm.empty(slot), sm.dq_stage(c), sm.dq_staged(c), sm.dq_free(c),
        sm.dq_mailbox(c), c, j, share, warp, lane);
  }
  if constexpr (kDq == DqAdds::kAnyOrder)
    if (warp == 0 && lane == 0) bulk_wait<0>();

  // ---- epilogue: every key row of the block, zeros for keys no query sees; dV's, or dK's.
  const Sequence& seq = kb.seq;
  const int key = kb.n0 + warp * 16;
  const long long seq_stride = kFirst ? p.dv_seq_stride : p.dk_seq_stride;
  const long long row0 = Cfg::kVarlen ? seq.k_start * seq_stride
                                      : kb.batch * (kFirst ? p.dv_batch_stride : p.dk_batch_stride);
  Storage* rows = static_cast<Storage*>(kFirst ? p.d_v : p.d_k) + row0 +
                  kb.kv_head * (kFirst ? p.dv_head_stride : p.dk_head_stride) + key * seq_stride;
  store_scaled_rows<Cfg>(acc, kFirst ? 1.f : p.softmax_scale, rows, seq_stride, key, seq.seqlen_k,
                         kFirst ? Cfg::kHeadDimV : Cfg::kHeadDimQk, lane);
}

}  // namespace sm90_bwd

template <class Cfg, DqAdds kDq>
__device__ __forceinline__ void bwd_dkdv_sm90_body(const BwdParams& p, const TmaDesc* tm_q,
                                                   const TmaDesc* tm_k, const TmaDesc* tm_v,
                                                   const TmaDesc* tm_do) {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = (raw + 1023u) & ~1023u;
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
    for (int slot = 0; slot < Cfg::kStages; ++slot) {
      mbar_init(sm.full(slot), 32);  // every producer lane: its rows; lane 0 also the bytes
      // Every consumer thread arrives once its reads of the slot are done: the LSE and D rows
      // are read by every lane (one lane's arrival after a __syncwarp would order them too,
      // but compute-sanitizer's racecheck credits a release only to the threads that arrive).
      mbar_init(sm.empty(slot), L::kConsumerThreads);
    }
    if constexpr (kDq == DqAdds::kKeyOrder)
      for (int c = 0; c < 2; ++c) {
        mbar_init(sm.dq_staged(c), 128);  // every thread of consumer c: its part of the tile
        mbar_init(sm.dq_free(c), 1);      // the dQ writer, once the add has read the stage
      }
    if constexpr (L::kPaired) mbar_init(sm.pt_full(), 128);  // the first consumer's threads
    mbar_fence_init();
  }
  __syncthreads();

  if (warp_group == 0) {
    regs_release<ws_regs::kProducer>();
    if (threadIdx.x < 32) sm90_bwd::produce<Cfg>(sm, p, kb, tm_q, tm_k, tm_v, tm_do);
    else if constexpr (kDq == DqAdds::kKeyOrder)
      if (threadIdx.x == 32) sm90_bwd::write_dq<Cfg>(sm, kb.steps(p));
  } else {
    regs_claim<ws_regs::kConsumer>();
    if constexpr (L::kPaired) {
      if (warp_group == 1) sm90_bwd::consume_paired<Cfg, kDq, true>(sm, p, kb);
      else sm90_bwd::consume_paired<Cfg, kDq, false>(sm, p, kb);
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
