// FlashAttention-3 forward for sm_90a: warp-specialised, TMA + mbarrier + wgmma.
//
// The grid is persistent: one CTA a multiprocessor, each taking tiles (kBlockM = 128 query
// rows of one (batch, head) and one slice of the V columns) from a global counter until none
// are left, so one tile's loads overlap the last one's products and epilogue. A CTA is three
// warp groups:
//   - warp group 0, the producer, gives most of its registers away (setmaxnreg); its first
//     warp draws the tiles and one thread issues every load: per tile the first K and V
//     tiles, each consumer's Q rows (once that consumer is done with the last tile's:
//     q_empty), then the other K and V tiles of kBlockN keys, into a kStages-deep
//     shared-memory ring that runs on across tiles, each slot guarded by a "full" mbarrier
//     (TMA counts the bytes in) and an "empty" one (the consumers release the slot). The
//     tile and its key-tile count go to the consumers through shared memory with Q's
//     barrier (tile -1: none left).
//   - warp groups 1 and 2, the consumers, own 64 query rows each. Per key block:
//     S = Q K^T with both operands in 128-byte swizzled shared memory (wgmma SS), the online
//     softmax in registers, O += P V with P straight from the S registers (wgmma RS).
// Overlap: within a consumer, S of block n is issued before P V of block n-1, and the
// softmax of block n runs while that product is in flight. Between the consumers, a pair
// of named barriers passes a token (ping-pong) so that one issues its products while the
// other does its softmax, keeping the tensor cores busy.
// Tiles are 64-column panels (128 bytes a row, TMA's 128-byte swizzle span); columns past
// the head dim and rows past the sequence end arrive as zeros from TMA.
// Block masks (block_sparse, pattern) choose whole key tiles, as in the sm80 kernel: the
// producer and both consumers walk the same visited tiles (templates/attn/key_blocks.cuh), the
// CTA's i-th K/V tile (counted over all its tiles) in ring slot i % kStages, so a hidden tile
// never leaves a gap in the ring.
//
// Config (from the generated prelude): Element, kHeadDimQk, kHeadDimV, kDqkPad, kDvSlice,
// kDvSplits, kBlockM, kBlockN, kStages, kCausal, kWindow, kWindowLeft, kWindowRight,
// kBlockSparse, kPattern, kMaskBlockQ, kMaskBlockK, kPatternWindow, kPatternStride,
// kPatternGlobal, kVarlen.
#pragma once

#include "../arch/sm90.cuh"
#include "../attn/epilogue.cuh"
#include "../attn/key_blocks.cuh"
#include "../attn/mask.cuh"
#include "../attn/softmax.cuh"
#include "../tile/budgets.cuh"
#include "../tile/element.cuh"
#include "fwd_params.cuh"

namespace fj {

template <class Cfg>
struct Sm90FwdLayout {
  using Element = typename Cfg::Element;
  static constexpr int kThreads = 384;        // producer + two consumer warp groups
  static constexpr int kConsumerRows = 64;    // wgmma M: query rows per consumer
  // Rows are cut into panels of 128 bytes, the span of TMA's 128-byte swizzle.
  static constexpr int kQkPanels = (Cfg::kDqkPad * Element::kBytes + 127) / 128;
  static constexpr int kVPanels = (Cfg::kDvSlice * Element::kBytes + 127) / 128;
  static constexpr int kPanelRowBytes = 128;
  static_assert(Cfg::kPanelRowBytes == kPanelRowBytes, "the tensor maps write 128-byte rows");
  static constexpr int kQBytes = kQkPanels * Cfg::kBlockM * kPanelRowBytes;
  static constexpr int kKPanelBytes = Cfg::kBlockN * kPanelRowBytes;
  static constexpr int kKBytes = kQkPanels * kKPanelBytes;  // one ring slot
  static constexpr int kVBytes = kVPanels * kKPanelBytes;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + Cfg::kStages * kKBytes;
  static constexpr int kBarOffset = kVOffset + Cfg::kStages * kVBytes;
  static constexpr int kQHalfBytes = kQBytes / 2;  // one consumer's rows
  // q_full and q_empty for each consumer's Q rows, then k_full, v_full and empty for every
  // slot, 8 bytes each; then two TileInfo the producer hands over (8 bytes each).
  static constexpr int kBarBytes = 8 * (4 + 3 * Cfg::kStages) + 16;
  // The dynamic shared memory base is only 16-byte aligned; the swizzled tiles want 1024.
  static constexpr int kSharedBytes = budget::fwd_sm90_shared_bytes(
      Element::kBytes, Cfg::kDqkPad, Cfg::kDvSlice, Cfg::kBlockM, Cfg::kBlockN, Cfg::kStages);
  static_assert(kSharedBytes == kBarOffset + kBarBytes + 1024 &&
                    kBarBytes == budget::fwd_sm90_barrier_bytes(Cfg::kStages),
                "the budget holds Q, the K/V ring, the barriers and the alignment slack");
  static_assert(budget::fwd_sm90_consumer_registers(Cfg::kDvSlice, Cfg::kBlockN) <=
                    budget::kFwdSm90MaxAccumulatorRegisters,
                "O, S and P within a consumer's register budget");

  static constexpr int kSTiles = Cfg::kBlockN / 8;    // n8 tiles of S
  static constexpr int kOTiles = Cfg::kDvSlice / 8;   // n8 tiles of O
  static constexpr int kQkSteps = Cfg::kDqkPad / Element::kMmaK;  // k steps of Q K^T
  static constexpr int kPvSteps = Cfg::kBlockN / Element::kMmaK;  // k steps of P V

  static_assert(Cfg::kBlockM == 2 * kConsumerRows, "two consumer warp groups of 64 rows");
  static_assert(Cfg::kBlockN % 16 == 0 && Cfg::kBlockN <= 256, "wgmma N, and P in k16 steps");
  static_assert(Cfg::kDvSlice % 16 == 0 && Cfg::kDvSlice <= 256, "wgmma N of O");
  static_assert(Cfg::kStages >= 2, "the ring needs two slots");
  static_assert(Element::kBytes == 2 && Element::kMmaK == 16,
                "P is k16 steps of two elements a register (pack_p), as wgmma's RS wants");
};

namespace sm90 {

// Registers a thread. Every thread starts with kLaunchRegs (__launch_bounds__(384, 1):
// 65536 / 384, rounded down to a multiple of 8); setmaxnreg only moves registers inside the
// CTA's allocation, so the consumers' claim must be covered by what the producer gives back
// (with less, setmaxnreg.inc waits for ever). The producer's tile walk spills below 40.
constexpr int kLaunchRegs = 168, kProducerRegs = 40, kConsumerRegs = 232;
static_assert(128 * (kLaunchRegs - kProducerRegs) >= 256 * (kConsumerRegs - kLaunchRegs),
              "the consumers claim more registers than the producer frees");

// Named barriers of the ping-pong token: consumer c waits on kSchedBarrier + c.
constexpr u32 kSchedBarrier = 1;
constexpr u32 kSchedThreads = 256;

template <class Cfg>
struct Smem {
  using L = Sm90FwdLayout<Cfg>;
  u32 base;
  __device__ u32 q() const { return base + L::kQOffset; }
  __device__ u32 k(int slot) const { return base + L::kKOffset + slot * L::kKBytes; }
  __device__ u32 v(int slot) const { return base + L::kVOffset + slot * L::kVBytes; }
  // Consumer c's rows of every Q panel.
  __device__ u32 q_half(int c, int panel) const {
    return q() + panel * Cfg::kBlockM * L::kPanelRowBytes +
           c * L::kConsumerRows * L::kPanelRowBytes;
  }
  __device__ u32 q_full(int c) const { return base + L::kBarOffset + 8 * c; }
  __device__ u32 q_empty(int c) const { return base + L::kBarOffset + 8 * (2 + c); }
  __device__ u32 k_full(int slot) const { return base + L::kBarOffset + 8 * (4 + slot); }
  __device__ u32 v_full(int slot) const {
    return base + L::kBarOffset + 8 * (4 + Cfg::kStages + slot);
  }
  __device__ u32 empty(int slot) const {
    return base + L::kBarOffset + 8 * (4 + 2 * Cfg::kStages + slot);
  }
  // The TileInfo of the CTA's j-th tile: two, used in turn, as a consumer may still read
  // tile j's while the producer writes tile j + 1's.
  __device__ u32 info(int j) const {
    return base + L::kBarOffset + 8 * (4 + 3 * Cfg::kStages) + 8 * (j & 1);
  }
};

// What the producer tells the consumers of a tile: its index (-1: no tiles left) and the key
// tiles it visits (counted once, by the producer's warp).
struct TileInfo {
  int tile, tiles;
};

__device__ __forceinline__ void put_info(u32 addr, TileInfo info) {
  st_shared_u32(addr, info.tile);
  st_shared_u32(addr + 4, info.tiles);
}
// Broadcast from lane 0, so that ptxas sees warp-uniform values around the wgmma code.
__device__ __forceinline__ TileInfo get_info(u32 addr) {
  return {__shfl_sync(0xffffffffu, ld_shared_u32(addr), 0),
          __shfl_sync(0xffffffffu, ld_shared_u32(addr + 4), 0)};
}

// Where a tile sits in the problem. With cu_seqlens (kVarlen) its batch is a slice of the
// packed tensors, which the tensor maps see as one batch of total rows: the slice starts at
// row q_start / k_start and is seqlen_q / seqlen_k rows long. Rows a box reads past the
// slice belong to the next sequence: keys there are masked, query rows never stored.
struct Block {
  int m0, head, kv_head, batch, split, v_col0, diag;
  int q_start, k_start, seqlen_q, seqlen_k, tma_batch;
  KeySteps keys;
};

// The work list of the persistent grid. Tile t is query block m_blocks - 1 - t % m_blocks of
// head (t / m_blocks) % heads_q and of batch x V slice t / (m_blocks * heads_q): a head's
// query blocks last-first (under causal masking the last ones see the most keys, and starting
// them first shortens the tail), a head's blocks together (they share its K and V in L2).
// CTA b starts with tile b; every further tile is a ticket from p.tile_counter. Every CTA
// draws tickets until one is past the end, so the tickets drawn are exactly 0 .. total - 1
// and the CTA drawing the last one can reset the counter for the next launch.
template <class Cfg>
struct TileScheduler {
  int m_blocks, total;

  __device__ explicit TileScheduler(const FwdParams& p)
      : m_blocks((p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM),
        total(m_blocks * p.heads_q * p.batch * Cfg::kDvSplits) {}

  // The CTA's next tile (>= total: none), drawn by one thread.
  __device__ int next(int* counter) const {
    const int ticket = atomicAdd(counter, 1);
    if (ticket == total - 1) atomicExch(counter, 0);
    return ticket + static_cast<int>(gridDim.x);
  }

  // Tile `tile`'s place and keys. A varlen tile past its sequence's end visits no key and
  // stores nothing.
  __device__ Block block(int tile, const FwdParams& p) const {
    Block b;
    const int row_block = tile % m_blocks, rest = tile / m_blocks;
    b.m0 = (m_blocks - 1 - row_block) * Cfg::kBlockM;
    b.head = rest % p.heads_q;
    b.batch = rest / p.heads_q / Cfg::kDvSplits;
    b.split = rest / p.heads_q % Cfg::kDvSplits;
    b.kv_head = b.head / p.heads_per_kv;
    b.v_col0 = b.split * Cfg::kDvSlice;
    if constexpr (Cfg::kVarlen) {
      b.q_start = p.cu_seqlens_q[b.batch];
      b.k_start = p.cu_seqlens_k[b.batch];
      b.seqlen_q = p.cu_seqlens_q[b.batch + 1] - b.q_start;
      b.seqlen_k = p.cu_seqlens_k[b.batch + 1] - b.k_start;
      b.tma_batch = 0;
    } else {
      b.q_start = b.k_start = 0;
      b.seqlen_q = p.seqlen_q;
      b.seqlen_k = p.seqlen_k;
      b.tma_batch = b.batch;
    }
    b.diag = b.seqlen_k - b.seqlen_q;  // bottom-right alignment: row i sees keys <= i + diag
    b.keys = b.m0 < b.seqlen_q
                 ? key_steps<Cfg>(p.block_sparse, b.batch, b.head, b.m0,
                                  visible_keys<Cfg>(b.m0, Cfg::kBlockM, b.seqlen_k, b.diag))
                 : KeySteps{};
    return b;
  }
};

// The producer's first warp: per tile, the first visited key block's K/V tile, each
// consumer's Q rows, the K/V tiles of the other visited key blocks, then the next ticket,
// issued by lane 0. Its loops stay rolled: it runs on few registers, and issuing copies is
// not what limits the kernel. `it` counts the K/V tiles of the CTA's earlier tiles: the ring
// runs on across tiles.
template <class Cfg>
__device__ __forceinline__ void produce(const Smem<Cfg>& sm, const FwdParams& p,
                                        const TileScheduler<Cfg>& sched, const TmaDesc* tm_q,
                                        const TmaDesc* tm_k, const TmaDesc* tm_v) {
  using L = Sm90FwdLayout<Cfg>;
  constexpr int kPanelCols = L::kPanelRowBytes / Cfg::Element::kBytes;  // TMA box columns
  const int lane = threadIdx.x % 32;
  int tile = blockIdx.x, it = 0;
#pragma unroll 1
  for (int j = 0;; ++j) {
    const bool valid = tile < sched.total;
    int next = 0;
    const Block b = sched.block(valid ? tile : 0, p);
    const int tiles = visited_steps<Cfg>(b.keys, lane);  // the whole warp counts
    if (lane == 0) {
      // Tile j - 2's info, the last in this place, was read before its Q was released.
      put_info(sm.info(j), {valid ? tile : -1, tiles});
      KeyTileWalk walk;
      auto load_kv = [&]() {
        const int slot = it % Cfg::kStages;
        mbar_wait(sm.empty(slot), ((it / Cfg::kStages) & 1) ^ 1);  // the first pass finds it free
        const int key0 = walk.next<Cfg>(b.keys);
        mbar_arrive_expect_tx(sm.k_full(slot), L::kKBytes);
#pragma unroll 1
        for (int panel = 0; panel < L::kQkPanels; ++panel)
          tma_load_4d(sm.k(slot) + panel * L::kKPanelBytes, tm_k, panel * kPanelCols,
                      b.k_start + key0, b.kv_head, b.tma_batch, sm.k_full(slot));
        mbar_arrive_expect_tx(sm.v_full(slot), L::kVBytes);
#pragma unroll 1
        for (int panel = 0; panel < L::kVPanels; ++panel)
          tma_load_4d(sm.v(slot) + panel * L::kKPanelBytes, tm_v, b.v_col0 + panel * kPanelCols,
                      b.k_start + key0, b.kv_head, b.tma_batch, sm.v_full(slot));
        ++it;
      };
      // The first K/V tile goes before the Q waits, as a consumer's first S needs both: with
      // three or more ring slots its slot frees a block before the consumers let go of their
      // Q rows (with two, about when consumer 1 does, half a block after consumer 0).
      const int kv_tiles = valid ? tiles : 0;
      if (kv_tiles > 0) load_kv();
#pragma unroll 1
      for (int c = 0; c < 2; ++c) {
        mbar_wait(sm.q_empty(c), (j & 1) ^ 1);  // consumer c is done with its last Q rows
        // Rows wholly past the sequence end (consumer 1's, in a last query block of 64 rows
        // or fewer) are not loaded: their scores are never stored.
        if (valid && tiles > 0 && b.m0 + c * L::kConsumerRows < b.seqlen_q) {
          mbar_arrive_expect_tx(sm.q_full(c), L::kQHalfBytes);
#pragma unroll 1
          for (int panel = 0; panel < L::kQkPanels; ++panel)
            tma_load_4d(sm.q_half(c, panel), tm_q, panel * kPanelCols,
                        b.q_start + b.m0 + c * L::kConsumerRows, b.head, b.tma_batch,
                        sm.q_full(c));
        } else {
          mbar_arrive(sm.q_full(c));  // nothing to load: the info alone completes the phase
        }
      }
#pragma unroll 1
      for (int i = 1; i < kv_tiles; ++i) load_kv();
      // The next tile is drawn only now, with this one's loads issued, so that a CTA takes a
      // tile when it is about to run it and the grid's longest-first order holds to the end.
      // Drawn when a tile started, a long causal tile kept the next one waiting behind it
      // while other CTAs went idle (bench/NOTES.md entries 12, 13). The consumers still have
      // up to kStages key blocks to compute, which hides the atomic's latency.
      if (valid) next = sched.next(p.tile_counter);
    }
    if (!valid) return;
    tile = __shfl_sync(0xffffffffu, next, 0);
  }
}

// S = Q K^T for this consumer's 64 rows: one wgmma of N = kBlockN per k step; the step
// advances kStepBytes (32) inside a 128-byte panel row, then moves to the next panel.
template <class Cfg>
__device__ __forceinline__ void issue_qk(float (&s)[Cfg::kBlockN / 8][4], u32 q_tile, u32 k_tile) {
  using L = Sm90FwdLayout<Cfg>;
  using Element = typename Cfg::Element;
  constexpr int kStepBytes = Element::kMmaK * Element::kBytes;
  constexpr int kStepsPerPanel = L::kPanelRowBytes / kStepBytes;
  const u64 q_desc = smem_desc_swizzled<L::kPanelRowBytes>(q_tile, 16);
#pragma unroll
  for (int t = 0; t < L::kQkSteps; ++t) {
    const u32 in_panel = (t % kStepsPerPanel) * kStepBytes;
    // Q's descriptors are the same every key block; built here, in the loop, so that the
    // compiler cannot keep all kQkSteps of them live across it (64 bits each).
    const int panel = t / kStepsPerPanel;
    const u64 a = desc_advance(q_desc, panel * Cfg::kBlockM * L::kPanelRowBytes + in_panel);
    const u64 b =
        smem_desc_swizzled<L::kPanelRowBytes>(k_tile + panel * L::kKPanelBytes + in_panel, 16);
    Wgmma<Cfg::kBlockN>::ss(s, a, b, t > 0);
  }
}

// O += P V: P's k16 step t is the S accumulator's n8 tiles 2t and 2t+1 (no shuffles); V is
// MN-major, kMmaK (16) keys = 2048 bytes a step, its 64-column panels kKPanelBytes apart.
template <class Cfg>
__device__ __forceinline__ void issue_pv(float (&o)[Cfg::kDvSlice / 8][4],
                                         const u32 (&p)[Cfg::kBlockN / 16][4], u32 v_tile) {
  using L = Sm90FwdLayout<Cfg>;
  constexpr int kStepBytes = Cfg::Element::kMmaK * L::kPanelRowBytes;
#pragma unroll
  for (int t = 0; t < L::kPvSteps; ++t)
    Wgmma<Cfg::kDvSlice>::rs(
        o, p[t],
        smem_desc_swizzled<L::kPanelRowBytes>(v_tile + t * kStepBytes, L::kKPanelBytes), true);
}

template <class Cfg>
__device__ __forceinline__ void pack_p(u32 (&p)[Cfg::kBlockN / 16][4],
                                       const float (&s)[Cfg::kBlockN / 8][4]) {
  using Element = typename Cfg::Element;
#pragma unroll
  for (int t = 0; t < Cfg::kBlockN / 16; ++t) {
    p[t][0] = Element::pack(s[2 * t][0], s[2 * t][1]);
    p[t][1] = Element::pack(s[2 * t][2], s[2 * t][3]);
    p[t][2] = Element::pack(s[2 * t + 1][0], s[2 * t + 1][1]);
    p[t][3] = Element::pack(s[2 * t + 1][2], s[2 * t + 1][3]);
  }
}

// One consumer warp group (index c, rows c*64 .. c*64+63) on one tile of n_blocks key tiles;
// `it` counts the K/V tiles of the CTA's earlier tiles (the ring's position).
template <class Cfg>
__device__ __forceinline__ void consume(const Smem<Cfg>& sm, const Block& b, const FwdParams& p,
                                        int c, int n_blocks, int it) {
  using L = Sm90FwdLayout<Cfg>;
  constexpr int kST = L::kSTiles, kOT = L::kOTiles, kStages = Cfg::kStages;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int rows0 = b.m0 + c * L::kConsumerRows;  // this warp group's first row
  const int row = rows0 + warp * 16 + lane / 4;   // this thread's first row
  const u32 q_tile = sm.q_half(c, 0);
  KeyTileWalk walk;  // the keys of block n, in the order the producer loaded them

  float o[kOT][4];
  float s[kST][4];
  u32 pf[Cfg::kBlockN / 16][4];
  float row_max[2] = {neg_inf(), neg_inf()};
  float row_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < kOT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

  // The turn passes after every block's products, across tiles too: both consumers walk the
  // same blocks, so the token alternates for the CTA's whole life.
  const u32 my_turn = kSchedBarrier + c, other_turn = kSchedBarrier + (1 - c);
  auto pass_turn = [&]() { named_arrive(other_turn, kSchedThreads); };
  // Softmax of the block of keys from key0 (its S in `s`): mask, running max and sums, P in
  // place; returns in alpha the factor for the O accumulated before this block.
  auto softmax = [&](int key0, float (&alpha)[2]) {
    if (block_needs_mask<Cfg>(rows0, L::kConsumerRows, key0, Cfg::kBlockN, b.seqlen_k, b.diag))
      mask_scores<Cfg>(s, row, key0, b.seqlen_k, b.diag, lane);
    softmax_step(s, row_max, row_sum, p.scale_log2, alpha);
  };
  auto release = [&](int slot) {
    if (lane == 0) mbar_arrive(sm.empty(slot));
  };
  // This warp's last read of its Q rows is done: the producer may load the next tile's.
  auto release_q = [&]() {
    if (lane == 0) mbar_arrive(sm.q_empty(c));
  };
  auto slot_of = [&](int n) { return (it + n) % kStages; };
  auto phase_of = [&](int n) { return static_cast<u32>(((it + n) / kStages) & 1); };

  if (n_blocks == 0) release_q();
  if (n_blocks > 0) {
    // Block 0: S only.
    mbar_wait(sm.k_full(slot_of(0)), phase_of(0));
    named_sync(my_turn, kSchedThreads);
    wgmma_fence();
    issue_qk<Cfg>(s, q_tile, sm.k(slot_of(0)));
    wgmma_commit();
    pass_turn();
    wgmma_wait<0>();
    if (n_blocks == 1) release_q();
    float alpha[2];
    softmax(walk.next<Cfg>(b.keys), alpha);
    pack_p<Cfg>(pf, s);

    // Block n: issue S(n), then P(n-1) V(n-1); the softmax of S(n) overlaps that product.
    for (int n = 1; n < n_blocks; ++n) {
      const int slot = slot_of(n), prev = slot_of(n - 1);
      const int key0 = walk.next<Cfg>(b.keys);  // read before the waits hide its latency
      mbar_wait(sm.k_full(slot), phase_of(n));
      named_sync(my_turn, kSchedThreads);
      wgmma_fence();
      issue_qk<Cfg>(s, q_tile, sm.k(slot));
      wgmma_commit();
      mbar_wait(sm.v_full(prev), phase_of(n - 1));
      wgmma_fence();  // each chain opens with a fence, or ptxas inserts one (C7519)
      issue_pv<Cfg>(o, pf, sm.v(prev));
      wgmma_commit();
      pass_turn();
      wgmma_wait<1>();  // S(n) has landed
      if (n == n_blocks - 1) release_q();
      softmax(key0, alpha);
      wgmma_wait<0>();  // P(n-1) V(n-1) is done: its slot and the P registers are free
      release(prev);
      rescale_rows(o, alpha);
      pack_p<Cfg>(pf, s);
    }

    // The last block's P V.
    const int last = slot_of(n_blocks - 1);
    mbar_wait(sm.v_full(last), phase_of(n_blocks - 1));
    wgmma_fence();
    issue_pv<Cfg>(o, pf, sm.v(last));
    wgmma_commit();
    wgmma_wait<0>();
    release(last);
  }

  // ---- epilogue: O / l to the output type, LSE in natural log. LSE is [batch, heads_q,
  // seqlen_q], or with cu_seqlens [heads_q, total_q].
  const int tile_row = rows0 + warp * 16;
  const long long o_row0 = Cfg::kVarlen ? b.q_start * p.o_seq_stride : b.batch * p.o_batch_stride;
  using Storage = typename Cfg::Element::Storage;
  Storage* o_rows = static_cast<Storage*>(p.o) + o_row0 + b.head * p.o_head_stride +
                    tile_row * p.o_seq_stride + b.v_col0;
  const long long lse_row0 =
      Cfg::kVarlen ? static_cast<long long>(b.head) * p.cu_seqlens_q[p.batch] + b.q_start
                   : (static_cast<long long>(b.batch) * p.heads_q + b.head) * p.seqlen_q;
  float* lse = b.split == 0 && p.lse != nullptr ? p.lse + lse_row0 + tile_row : nullptr;
  store_rows<Cfg>(o, row_max, row_sum, o_rows, p.o_seq_stride, tile_row, b.seqlen_q,
                  Cfg::kHeadDimV - b.v_col0, lse, lane);
}

// A consumer warp group over the CTA's tiles, as the producer hands them over.
template <class Cfg>
__device__ __forceinline__ void consume_tiles(const Smem<Cfg>& sm, const FwdParams& p,
                                              const TileScheduler<Cfg>& sched, int c) {
  if (c == 1) named_arrive(kSchedBarrier, kSchedThreads);  // consumer 0 takes the first turn
  int it = 0;
#pragma unroll 1
  for (int j = 0;; ++j) {
    mbar_wait(sm.q_full(c), j & 1);
    const TileInfo info = get_info(sm.info(j));
    if (info.tile < 0) return;
    consume<Cfg>(sm, sched.block(info.tile, p), p, c, info.tiles, it);
    it += info.tiles;
  }
}

}  // namespace sm90

template <class Cfg>
__device__ __forceinline__ void fwd_sm90(const FwdParams& p, const TmaDesc* tm_q,
                                         const TmaDesc* tm_k, const TmaDesc* tm_v) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const sm90::Smem<Cfg> sm{(raw + 1023u) & ~1023u};
  const sm90::TileScheduler<Cfg> sched(p);

  // Read from lane 0 so that ptxas sees a warp-uniform value: wgmma in a branch it cannot
  // prove uniform gets serialised (ptxas C7520).
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(tm_q);
    tma_prefetch_descriptor(tm_k);
    tma_prefetch_descriptor(tm_v);
    for (int c = 0; c < 2; ++c) {
      mbar_init(sm.q_full(c), 1);
      mbar_init(sm.q_empty(c), 4);  // one arrival per warp of consumer c
    }
    for (int slot = 0; slot < Cfg::kStages; ++slot) {
      mbar_init(sm.k_full(slot), 1);
      mbar_init(sm.v_full(slot), 1);
      mbar_init(sm.empty(slot), 8);  // one arrival per warp of both consumers
    }
    mbar_fence_init();
  }
  __syncthreads();

  // Each role is one branch, so that ptxas honours setmaxnreg.
  if (warp_group == 0) {
    regs_release<sm90::kProducerRegs>();
    if (threadIdx.x < 32) sm90::produce<Cfg>(sm, p, sched, tm_q, tm_k, tm_v);
  } else {
    regs_claim<sm90::kConsumerRegs>();
    sm90::consume_tiles<Cfg>(sm, p, sched, warp_group - 1);
  }
}

}  // namespace fj
