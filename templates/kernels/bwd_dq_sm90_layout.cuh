// The sm90 dQ kernel's shared-memory layout, its barriers and its row block: what the
// producer and the consumers of kernels/bwd_dq_sm90.cuh share.
#pragma once

#include "../arch/sm90.cuh"
#include "../attn/epilogue.cuh"
#include "../attn/mask.cuh"
#include "../attn/sequence.cuh"
#include "../attn/softmax.cuh"
#include "../tile/budgets.cuh"
#include "../tile/element.cuh"
#include "../tile/wgmma_tiles.cuh"
#include "bwd_params.cuh"

namespace fj {

template <class Cfg>
struct Sm90BwdDqLayout {
  using Element = typename Cfg::Element;
  static constexpr int kThreads = 384;      // producer + two consumer warp groups
  static constexpr int kConsumerRows = 64;  // wgmma M: query rows per consumer
  // 64 rows a CTA: both consumers on the same rows, in the roles consume_paired describes.
  static constexpr bool kPaired = Cfg::kBlockM == budget::kBwdDqSm90PairedRows;
  static constexpr int kQkPanels = budget::panels(Cfg::kDqkPad, Element::kBytes);
  static constexpr int kVPanels = budget::panels(Cfg::kDvPad, Element::kBytes);
  static constexpr int kRow = budget::kPanelRowBytes;
  static_assert(Cfg::kPanelRowBytes == kRow, "the tensor maps write 128-byte rows");
  static constexpr int kQPanelBytes = Cfg::kBlockM * kRow;  // a 64-column panel of Q or dO
  static constexpr int kKPanelBytes = Cfg::kBlockN * kRow;  // of a K or V tile
  static constexpr int kKBytes = kQkPanels * kKPanelBytes;  // one ring slot's K
  static constexpr int kVBytes = kVPanels * kKPanelBytes;
  static constexpr int kQOffset = 0;
  static constexpr int kDoOffset = kQOffset + kQkPanels * kQPanelBytes;
  static constexpr int kKOffset = kDoOffset + kVPanels * kQPanelBytes;
  static constexpr int kVOffset = kKOffset + Cfg::kStages * kKBytes;
  // Paired consumers' P (fp32) and dS (packed), each in the order of the registers of the
  // consumer that writes it, then their mbarriers.
  static constexpr int kPOffset = kVOffset + Cfg::kStages * kVBytes;
  static constexpr int kPBytes = kPaired ? kConsumerRows * Cfg::kBlockN * 4 : 0;
  static constexpr int kDsOffset = kPOffset + kPBytes;
  static constexpr int kDsBytes = kPaired ? kConsumerRows * Cfg::kBlockN * 2 : 0;
  static constexpr int kExchangeBarOffset = kDsOffset + kDsBytes;
  static constexpr int kBarOffset =
      kPOffset + budget::bwd_dq_sm90_exchange_bytes(Cfg::kBlockM, Cfg::kBlockN);
  static constexpr int kSharedBytes = budget::bwd_dq_sm90_shared_bytes(
      Element::kBytes, Cfg::kDqkPad, Cfg::kDvPad, Cfg::kBlockM, Cfg::kBlockN, Cfg::kStages);
  static_assert(kSharedBytes == kBarOffset + budget::bwd_sm90_barrier_bytes(Cfg::kStages) + 1024,
                "the budget holds Q, dO, the K/V ring, the barriers and the alignment slack");
  static_assert((kPaired ? budget::bwd_dq_sm90_paired_registers(Cfg::kDkSlice, Cfg::kBlockN)
                         : budget::bwd_dq_sm90_consumer_registers(Cfg::kDkSlice, Cfg::kBlockN)) <=
                    budget::kBwdDqSm90MaxAccumulatorRegisters,
                "S, dP, dS and dQ within a consumer's register budget");
  // Paired: the first consumer's share of dQ's columns (a whole panel of K's columns or
  // more, so that the second's starts on a panel), the second's the rest.
  static constexpr int kDqCols0 = budget::bwd_dkdv_sm90_dq_cols0(Cfg::kDkSlice);
  static constexpr int kDqCols1 = Cfg::kDkSlice - kDqCols0;
  static_assert(!kPaired || (kDqCols0 % 64 == 0 && kDqCols0 <= 256 && kDqCols1 <= 256),
                "paired shares start on a panel of K, each a wgmma N");

  static constexpr int kSTiles = Cfg::kBlockN / 8;  // n8 tiles of S (key columns)
  static constexpr int kDqTiles = Cfg::kDkSlice / 8;

  static_assert(Cfg::kBlockM == 2 * kConsumerRows || kPaired,
                "two consumer warp groups of 64 rows, or both on the same 64");
  static_assert(Cfg::kBlockN % 16 == 0 && Cfg::kBlockN <= 256, "wgmma N of S, k16 steps of dS");
  static_assert(Cfg::kDvSplits == 1 && Cfg::kDkSlice == Cfg::kDqkPad, "dQ whole");
  static_assert(Cfg::kStages >= 1, "a ring slot");
  static_assert(Element::kBytes == 2 && Element::kMmaK == 16, "k16 steps of 16-bit elements");
};

namespace sm90_bwd_dq {

template <class Cfg>
struct Smem {
  using L = Sm90BwdDqLayout<Cfg>;
  u32 base;
  unsigned char* generic;  // the same address, for the exchange's plain loads and stores
  __device__ u32 q() const { return base + L::kQOffset; }
  __device__ u32 d_o() const { return base + L::kDoOffset; }
  __device__ u32 k(int slot) const { return base + L::kKOffset + slot * L::kKBytes; }
  __device__ u32 v(int slot) const { return base + L::kVOffset + slot * L::kVBytes; }
  // Paired consumers: P as float4s, 128 threads apart, and dS as uint4s; the mbarriers that
  // say each is there (its writer's threads arrive) and that its reader is done with it.
  __device__ float4* p() const { return reinterpret_cast<float4*>(generic + L::kPOffset); }
  __device__ uint4* ds() const { return reinterpret_cast<uint4*>(generic + L::kDsOffset); }
  __device__ u32 p_full() const { return base + L::kExchangeBarOffset; }
  __device__ u32 p_empty() const { return p_full() + 8; }
  __device__ u32 ds_full() const { return p_full() + 16; }
  __device__ u32 ds_empty() const { return p_full() + 24; }
  __device__ u32 q_full() const { return base + L::kBarOffset; }
  __device__ u32 full(int slot) const { return base + L::kBarOffset + 8 * (1 + slot); }
  __device__ u32 empty(int slot) const {
    return base + L::kBarOffset + 8 * (1 + Cfg::kStages + slot);
  }
};

// The CTA's query rows and the key tiles they see (causal and window bands).
template <class Cfg>
struct RowBlock {
  int m0, head, kv_head, batch;
  Sequence seq;
  int tile0, tiles;

  __device__ RowBlock(const BwdParams& p)
      : m0(blockIdx.x * Cfg::kBlockM),
        head(blockIdx.y),
        kv_head(head / p.heads_per_kv),
        batch(blockIdx.z),
        seq(sequence_of<Cfg::kVarlen>(p, batch)) {
    const KeyRange keys = visible_keys<Cfg>(m0, Cfg::kBlockM, seq.seqlen_k, seq.diag);
    tile0 = keys.begin / Cfg::kBlockN;
    tiles = keys.end > keys.begin ? (keys.end + Cfg::kBlockN - 1) / Cfg::kBlockN - tile0 : 0;
  }
};

// A consumer's end of key tile n: with one ring slot the next tile's copy waits for the only
// slot, and the next step waits for that copy, so the slot is freed here, once this tile's dQ
// product has read K (with two, the next step frees it).
template <class Cfg>
__device__ __forceinline__ void end_tile(const Smem<Cfg>& sm, int slot, int lane) {
  if constexpr (Cfg::kStages == 1) {
    wgmma_wait<0>();
    if (lane == 0) mbar_arrive(sm.empty(slot));
  }
}

// After the last key tile: its dQ product has landed, and (two slots) its slot is freed; then
// the consumer's dQ tile, rows from this warp's and columns from col0, scaled into dQ (every
// row of the block is written, zeros for rows that see no key).
template <class Cfg, int kTiles>
__device__ __forceinline__ void finish_dq(const Smem<Cfg>& sm, const BwdParams& p,
                                          const RowBlock<Cfg>& rb, const float (&acc)[kTiles][4],
                                          int rows0, int col0, int warp, int lane) {
  using Storage = typename Cfg::Element::Storage;
  wgmma_wait<0>();
  if (Cfg::kStages > 1 && rb.tiles > 0 && lane == 0)
    mbar_arrive(sm.empty((rb.tiles - 1) % Cfg::kStages));
  const Sequence& seq = rb.seq;
  const long long dq_row0 =
      Cfg::kVarlen ? seq.q_start * p.dq_seq_stride : rb.batch * p.dq_batch_stride;
  const int tile_row = rows0 + warp * 16;
  Storage* dq = static_cast<Storage*>(p.d_q) + dq_row0 + rb.head * p.dq_head_stride +
                tile_row * p.dq_seq_stride + col0;
  store_scaled_rows<Cfg>(acc, p.softmax_scale, dq, p.dq_seq_stride, tile_row, seq.seqlen_q,
                         Cfg::kHeadDimQk - col0, lane);
}

}  // namespace sm90_bwd_dq
}  // namespace fj
