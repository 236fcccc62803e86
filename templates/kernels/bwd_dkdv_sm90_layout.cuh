// The sm90 dK/dV kernel's shared-memory layout, its barriers and its key block: what the
// producer, the consumers and the dQ writer of kernels/bwd_dkdv_sm90.cuh share.
#pragma once

#include "../arch/sm90.cuh"
#include "../attn/dq_accum.cuh"
#include "../attn/epilogue.cuh"
#include "../attn/mask.cuh"
#include "../attn/sequence.cuh"
#include "../attn/softmax.cuh"
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
  // 64 keys a CTA: both consumers on the same keys, in the roles the top describes.
  static constexpr bool kPaired = Cfg::kBlockN == budget::kBwdDkDvSm90PairedKeys;
  // 96 keys a CTA: the swapped products of kernels/bwd_dkdv_swapped_sm90.cuh.
  static constexpr bool kSwapped = Cfg::kBlockN == budget::kBwdDkDvSm90SwappedKeys;
  // Keys per consumer: S^T's wgmma M, or (swapped) S's and dP's N.
  static constexpr int kConsumerKeys = kSwapped ? Cfg::kBlockN / 2 : 64;
  // K, V, Q and dO lie in panels of kRow-byte rows (TMA's swizzle span: 128 bytes, or 64 or
  // 32 where the padded head dims are no multiple of 128 bytes; the plan chooses), kPanelCols
  // columns each; the dS^T tiles in 128-byte ones.
  static constexpr int kRow = Cfg::kPanelRowBytes;
  static constexpr int kPanelCols = kRow / Element::kBytes;
  static constexpr int kDsRow = budget::kPanelRowBytes;
  static constexpr int kQkPanels = budget::panels(Cfg::kDqkPad, Element::kBytes, kRow);  // K's
  static constexpr int kVPanels = budget::panels(Cfg::kDvPad, Element::kBytes, kRow);    // V's
  // Q's and dO's: every split's slice lies inside the tile, its panels past the head dim
  // zeros (TMA fills them), so the last split's wgmma N never reads past the tile.
  static constexpr int kQPanels = budget::panels(
      budget::bwd_dkdv_sm90_tile_cols(Cfg::kDqkPad, Cfg::kDkSlice, Cfg::kDvSplits),
      Element::kBytes, kRow);
  static constexpr int kDoPanels = budget::panels(
      budget::bwd_dkdv_sm90_tile_cols(Cfg::kDvPad, Cfg::kDvSlice, Cfg::kDvSplits),
      Element::kBytes, kRow);
  static constexpr int kKPanelBytes = Cfg::kBlockN * kRow;  // one panel of K or V
  static constexpr int kQPanelBytes = Cfg::kBlockM * kRow;  // of a Q or dO tile
  // Q's ring slots (with the rows' LSE and D) and dO's: both Cfg::kStages, except swapped
  // consumers at one slot, whose dO takes one slot with its own mbarriers and Q two
  // (budget::bwd_dkdv_sm90_one_do_slot).
  static constexpr bool kOneDoSlot = budget::bwd_dkdv_sm90_one_do_slot(Cfg::kBlockN, Cfg::kStages);
  static constexpr int kQSlots = budget::bwd_dkdv_sm90_q_slots(Cfg::kBlockN, Cfg::kStages);
  static constexpr int kDoSlots = Cfg::kStages;
  static constexpr int kKBytes = kQkPanels * kKPanelBytes;
  static constexpr int kVBytes = kVPanels * kKPanelBytes;
  static constexpr int kQBytes = kQPanels * kQPanelBytes;  // one ring slot's Q
  static constexpr int kDoBytes = kDoPanels * kQPanelBytes;
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKOffset + kKBytes;
  static constexpr int kQOffset = kVOffset + kVBytes;
  static constexpr int kDoOffset = kQOffset + kQSlots * kQBytes;
  // The dQ variant's dS^T tiles, kBlockN key rows of kBlockM queries in panels of 64 (one
  // 128-byte row each), and its consumers' staged dQ tiles.
  static constexpr int kDsBuffers =
      kAccumulateDq ? budget::bwd_dkdv_sm90_ds_buffers(Cfg::kBlockN, Cfg::kStages) : 0;
  static constexpr int kDsBytes = Cfg::kBlockN * Cfg::kBlockM * Element::kBytes;
  static constexpr int kDsPanelBytes = Cfg::kBlockN * kDsRow;
  // 1024-byte aligned, as 128-byte swizzled tiles are (narrower panels of a step of 48 or 80
  // query rows may end between).
  static constexpr int kDsOffset = budget::align_1024(kDoOffset + kDoSlots * kDoBytes);
  // Paired consumers' P^T (fp32, in the order of the first's registers), then its mbarriers;
  // swapped consumers' P^T (one tile as dS^T's, each its own 48 key rows).
  static constexpr int kPtOffset = kDsOffset + kDsBuffers * kDsBytes;
  static constexpr int kPtBytes = budget::bwd_dkdv_sm90_pt_bytes(Cfg::kBlockM, Cfg::kBlockN);
  static constexpr int kDqStage0Bytes =
      kAccumulateDq ? budget::bwd_dkdv_sm90_dq_stage_bytes(Cfg::kDkSlice, Cfg::kBlockM, 0) : 0;
  static constexpr int kDqStage1Bytes =
      kAccumulateDq ? budget::bwd_dkdv_sm90_dq_stage_bytes(Cfg::kDkSlice, Cfg::kBlockM, 1) : 0;
  static constexpr int kDqStageOffset = kPtOffset + kPtBytes;
  // The dQ variants' mailboxes, one a consumer: its "staged" and "free" mbarriers, then the
  // staged tile's block (null: nothing to add), and in key-block order its counter and the
  // turn.
  static constexpr int kDqMailboxOffset = kDqStageOffset + kDqStage0Bytes + kDqStage1Bytes;
  static constexpr int kDqMailboxBytes = kAccumulateDq ? budget::kDqMailboxBytes : 0;
  static constexpr int kRowsOffset = kDqMailboxOffset + 2 * kDqMailboxBytes;  // LSE, D a Q slot
  static constexpr int kBarOffset = kRowsOffset + kQSlots * Cfg::kBlockM * 2 * 4;
  static constexpr int kSharedBytes = budget::bwd_dkdv_sm90_shared_bytes(
      Element::kBytes, kRow, Cfg::kDqkPad, Cfg::kDvPad, Cfg::kDkSlice, Cfg::kDvSlice,
      Cfg::kDvSplits, Cfg::kBlockM, Cfg::kBlockN, Cfg::kStages,
      kAccumulateDq
          ? budget::bwd_dkdv_sm90_dq_bytes(Element::kBytes, Cfg::kDkSlice, Cfg::kBlockM,
                                           Cfg::kBlockN, Cfg::kStages)
          : 0);
  static_assert(kSharedBytes ==
                    kBarOffset + budget::bwd_dkdv_sm90_barrier_bytes(Cfg::kBlockN, Cfg::kStages),
                "the budget holds K, V, the ring, the dS^T and dQ tiles, the rows' LSE and D "
                "and the barriers");
  // The two consumers' shares of the split's kDkSlice dQ columns at 64 rows a step: a share
  // lies inside one panel of K or starts on one (an MN-major operand's columns cannot start
  // mid-panel). At 128 rows each takes 64 rows, every column.
  static constexpr bool kDqRowsSplit = budget::bwd_dkdv_sm90_dq_rows_split(Cfg::kBlockM);
  static constexpr int kDqCols0 = budget::bwd_dkdv_sm90_dq_cols0(Cfg::kDkSlice);
  static constexpr int kDqCols1 = Cfg::kDkSlice - kDqCols0;
  static_assert(kDqTileRows * Element::kBytes == kDsRow, "dS^T panels of 64 queries, dQ's wgmma M");
  static_assert(!kAccumulateDq || Cfg::kBlockM == kDqTileRows ||
                    kDqRowsSplit,
                "a step is one block of dq_accum, or two (one a consumer, every column)");

  static_assert((kPaired ? budget::bwd_dkdv_sm90_paired_registers(Cfg::kDkSlice, Cfg::kDvSlice,
                                                                  Cfg::kBlockM, kAccumulateDq)
                 : kSwapped ? budget::bwd_dkdv_sm90_swapped_registers(Cfg::kDqkPad, Cfg::kDvPad)
                 : kAccumulateDq
                     ? budget::bwd_dkdv_sm90_dq_step_registers(Cfg::kDkSlice, Cfg::kDvSlice,
                                                               Cfg::kBlockM)
                     : budget::bwd_dkdv_sm90_consumer_registers(Cfg::kDkSlice, Cfg::kDvSlice,
                                                                Cfg::kBlockM)) <=
                    budget::kBwdDkDvSm90MaxAccumulatorRegisters,
                "a consumer's accumulators within its register budget");
  static_assert(!kPaired || !kAccumulateDq ||
                    (Cfg::kDvSplits == 1 && Cfg::kBlockM == kDqTileRows),
                "paired consumers accumulating dQ hold whole columns, at 64 query rows a step");
  static_assert(!kSwapped || (kDq == DqAdds::kAnyOrder && Cfg::kDvSplits == 1 &&
                              Cfg::kBlockM == kDqTileRows),
                "swapped consumers add dQ in any order, hold whole columns, at 64 query rows a "
                "step (S's wgmma M and dS^T's one 128-byte panel row)");
  static_assert(!kSwapped || (kConsumerKeys * kRow) % (8 * kRow) == 0,
                "the second consumer's K and V rows start on a swizzle atom");

  static constexpr int kQTiles = Cfg::kBlockM / 8;  // n8 tiles of S^T (query columns)
  static constexpr int kDkTiles = Cfg::kDkSlice / 8;
  static constexpr int kDvTiles = Cfg::kDvSlice / 8;
  // The head-dim columns dK's, dV's and dQ's products run on (wgmma_rs_mn_major_live; 0: all
  // of them).
  static constexpr bool kLiveWidths = budget::bwd_dkdv_sm90_live_widths(Cfg::kDvSplits, kRow);
  static constexpr int kDkValid = kLiveWidths ? Cfg::kHeadDimQk : 0;
  static constexpr int kDvValid = kLiveWidths ? Cfg::kHeadDimV : 0;

  static_assert(Cfg::kBlockN == 2 * kConsumerKeys || kPaired,
                "two consumer warp groups of 64 keys, or both on the same 64");
  static_assert(Cfg::kBlockM % 16 == 0 && Cfg::kBlockM <= 256, "wgmma N of S^T, k16 steps");
  static_assert(Cfg::kDkSlice % 16 == 0 && Cfg::kDvSlice % 16 == 0 &&
                    (!kAccumulateDq || (Cfg::kDkSlice <= 256 && Cfg::kDvSlice <= 256)),
                "wgmma N of dK and dV (past 256 in two products, wgmma_rs_mn_major), and of the "
                "dQ shares");
  static_assert(Cfg::kDvSplits == 1 ||
                    (Cfg::kDkSlice % kPanelCols == 0 && Cfg::kDvSlice % kPanelCols == 0),
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

// The named barrier (id 0 is __syncthreads') that says both consumers' dS^T tiles are in
// shared memory. The dQ variants hand their staged tiles to the dQ writer through mbarriers
// (their mailboxes).
constexpr u32 kDsReadyBarrier = 1;

template <class Cfg, DqAdds kDq>
struct Smem {
  using L = Sm90BwdDkDvLayoutOf<Cfg, kDq>;
  u32 base;
  unsigned char* generic;  // the same address, for the rows' plain loads and stores
  __device__ u32 k() const { return base + L::kKOffset; }
  // K's columns from `col` on (an MN-major operand: its panel, then the column's bytes in it).
  __device__ u32 k_cols(int col) const {
    return k() + col / L::kPanelCols * L::kKPanelBytes + col % L::kPanelCols * Cfg::Element::kBytes;
  }
  __device__ u32 v() const { return base + L::kVOffset; }
  __device__ u32 q(int slot) const { return base + L::kQOffset + slot * L::kQBytes; }
  __device__ u32 d_o(int slot) const { return base + L::kDoOffset + slot * L::kDoBytes; }
  __device__ u32 ds(int buffer) const { return base + L::kDsOffset + buffer * L::kDsBytes; }
  __device__ u32 dq_stage(int consumer) const {
    return base + L::kDqStageOffset + consumer * L::kDqStage0Bytes;
  }
  // Paired consumers: P^T as float4s, 128 threads' apart; the mbarriers that say it is there
  // (the first's threads arrive) and that the second has read it (its threads arrive; the dQ
  // variants' dS^T barrier orders those reads already).
  __device__ float4* pt() const { return reinterpret_cast<float4*>(generic + L::kPtOffset); }
  __device__ u32 pt_full() const { return base + L::kPtOffset + L::kPtBytes - 16; }
  // Swapped consumers' P^T tile (the dS^T tile's layout).
  __device__ u32 pt_tile() const { return base + L::kPtOffset; }
  __device__ u32 pt_empty() const { return pt_full() + 8; }
  // Consumer c's tile is staged (its 128 threads arrive) / its stage is free (the writer).
  __device__ u32 dq_staged(int consumer) const {
    return base + L::kDqMailboxOffset + consumer * L::kDqMailboxBytes;
  }
  __device__ u32 dq_free(int consumer) const { return dq_staged(consumer) + 8; }
  __device__ u32 dq_mailbox(int consumer) const { return dq_staged(consumer) + 16; }
  // The Q slot's kBlockM LSE values (log2 domain), then its kBlockM D values.
  __device__ float* rows(int slot) const {
    return reinterpret_cast<float*>(generic + L::kRowsOffset) + slot * 2 * Cfg::kBlockM;
  }
  // The same as a shared-memory address (the producer's: a generic pointer takes two of its
  // 24 registers).
  __device__ u32 rows_at(int slot) const { return base + L::kRowsOffset + slot * 8 * Cfg::kBlockM; }
  __device__ u32 kv_full() const { return base + L::kBarOffset; }
  // A Q slot's (and with Q's, dO's: kOneDoSlot false).
  __device__ u32 full(int slot) const { return base + L::kBarOffset + 8 * (1 + slot); }
  __device__ u32 empty(int slot) const {
    return base + L::kBarOffset + 8 * (1 + L::kQSlots + slot);
  }
  // dO's one slot, where it has its own (kOneDoSlot).
  __device__ u32 do_full() const { return base + L::kBarOffset + 8 * (1 + 2 * L::kQSlots); }
  __device__ u32 do_empty() const { return do_full() + 8; }
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

}  // namespace sm90_bwd
}  // namespace fj
