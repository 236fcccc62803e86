// FlashAttention-3 forward for sm_90a: warp-specialised, TMA + mbarrier + wgmma.
//
// One CTA of three warp groups computes kBlockM = 128 query rows of one (batch, head) and
// one slice of the V columns:
//   - warp group 0, the producer, gives most of its registers away (setmaxnreg) and one of
//     its threads issues every load: Q once, then K and V tiles of kBlockN keys into a
//     kStages-deep shared-memory ring, each slot guarded by a "full" mbarrier (TMA counts
//     the bytes in) and an "empty" one (the consumers release the slot).
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
// producer and both consumers walk the same visited tiles (templates/key_blocks.cuh), the
// i-th of them in ring slot i % kStages, so a hidden tile never leaves a gap in the ring.
//
// Config (from the generated prelude): Element, kHeadDimQk, kHeadDimV, kDqkPad, kDvSlice,
// kDvSplits, kBlockM, kBlockN, kStages, kCausal, kWindow, kWindowLeft, kWindowRight,
// kBlockSparse, kPattern, kMaskBlockQ, kMaskBlockK, kPatternWindow, kPatternStride,
// kPatternGlobal.
#pragma once

#include "common.cuh"
#include "dtype.cuh"
#include "fwd_params.cuh"
#include "hopper.cuh"
#include "key_blocks.cuh"
#include "softmax.cuh"

namespace fj {

template <class Cfg>
struct Sm90FwdLayout {
  static constexpr int kThreads = 384;        // producer + two consumer warp groups
  static constexpr int kConsumerRows = 64;    // wgmma M: query rows per consumer
  static constexpr int kQkPanels = (Cfg::kDqkPad + 63) / 64;
  static constexpr int kVPanels = (Cfg::kDvSlice + 63) / 64;
  static constexpr int kPanelRowBytes = 128;
  static constexpr int kQBytes = kQkPanels * Cfg::kBlockM * kPanelRowBytes;
  static constexpr int kKPanelBytes = Cfg::kBlockN * kPanelRowBytes;
  static constexpr int kKBytes = kQkPanels * kKPanelBytes;  // one ring slot
  static constexpr int kVBytes = kVPanels * kKPanelBytes;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + Cfg::kStages * kKBytes;
  static constexpr int kBarOffset = kVOffset + Cfg::kStages * kVBytes;
  // q_full, then k_full, v_full and empty for every slot, 8 bytes each.
  static constexpr int kBarBytes = 8 * (1 + 3 * Cfg::kStages);
  // The dynamic shared memory base is only 16-byte aligned; the swizzled tiles want 1024.
  static constexpr int kSharedBytes = kBarOffset + kBarBytes + 1024;

  static constexpr int kSTiles = Cfg::kBlockN / 8;    // n8 tiles of S
  static constexpr int kOTiles = Cfg::kDvSlice / 8;   // n8 tiles of O
  static constexpr int kQkSteps = Cfg::kDqkPad / 16;  // k16 steps of Q K^T
  static constexpr int kPvSteps = Cfg::kBlockN / 16;  // k16 steps of P V

  static_assert(Cfg::kBlockM == 2 * kConsumerRows, "two consumer warp groups of 64 rows");
  static_assert(Cfg::kBlockN % 16 == 0 && Cfg::kBlockN <= 256, "wgmma N, and P in k16 steps");
  static_assert(Cfg::kDvSlice % 16 == 0 && Cfg::kDvSlice <= 256, "wgmma N of O");
  static_assert(Cfg::kStages >= 2, "the ring needs two slots");
};

namespace sm90 {

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
  __device__ u32 q_full() const { return base + L::kBarOffset; }
  __device__ u32 k_full(int slot) const { return base + L::kBarOffset + 8 * (1 + slot); }
  __device__ u32 v_full(int slot) const {
    return base + L::kBarOffset + 8 * (1 + Cfg::kStages + slot);
  }
  __device__ u32 empty(int slot) const {
    return base + L::kBarOffset + 8 * (1 + 2 * Cfg::kStages + slot);
  }
};

// Where the CTA sits in the problem.
struct Block {
  int m0, head, kv_head, batch, split, v_col0, diag;
  KeySteps keys;
  int tiles;  // the key tiles the CTA visits (visited_steps of keys), the same in every thread
};

// The producer's one thread: Q, then the K/V tiles of every visible key block. Its loops
// stay rolled: it runs on 24 registers, and issuing copies is not what limits the kernel.
template <class Cfg>
__device__ __forceinline__ void produce(const Smem<Cfg>& sm, const Block& b, const TmaDesc* tm_q,
                                        const TmaDesc* tm_k, const TmaDesc* tm_v) {
  using L = Sm90FwdLayout<Cfg>;
  mbar_arrive_expect_tx(sm.q_full(), L::kQBytes);
#pragma unroll 1
  for (int panel = 0; panel < L::kQkPanels; ++panel)
    tma_load_4d(sm.q() + panel * Cfg::kBlockM * L::kPanelRowBytes, tm_q, panel * 64, b.m0,
                b.head, b.batch, sm.q_full());
  const int n_blocks = b.tiles;
  KeyTileWalk walk;
#pragma unroll 1
  for (int i = 0; i < n_blocks; ++i) {
    const int slot = i % Cfg::kStages;
    const u32 phase = (i / Cfg::kStages) & 1;
    mbar_wait(sm.empty(slot), phase ^ 1);  // the first pass finds every slot free
    const int key0 = walk.next<Cfg>(b.keys);
    mbar_arrive_expect_tx(sm.k_full(slot), L::kKBytes);
#pragma unroll 1
    for (int panel = 0; panel < L::kQkPanels; ++panel)
      tma_load_4d(sm.k(slot) + panel * L::kKPanelBytes, tm_k, panel * 64, key0, b.kv_head,
                  b.batch, sm.k_full(slot));
    mbar_arrive_expect_tx(sm.v_full(slot), L::kVBytes);
#pragma unroll 1
    for (int panel = 0; panel < L::kVPanels; ++panel)
      tma_load_4d(sm.v(slot) + panel * L::kKPanelBytes, tm_v, b.v_col0 + panel * 64, key0,
                  b.kv_head, b.batch, sm.v_full(slot));
  }
}

// S = Q K^T for this consumer's 64 rows: one wgmma of N = kBlockN per k16 step; the step
// advances 32 bytes inside a 128-byte panel row, then moves to the next panel.
template <class Cfg>
__device__ __forceinline__ void issue_qk(float (&s)[Cfg::kBlockN / 8][4], u32 q_tile, u32 k_tile) {
  using L = Sm90FwdLayout<Cfg>;
  const u64 q_desc = smem_desc_sw128(q_tile, 16, 1024);
#pragma unroll
  for (int t = 0; t < L::kQkSteps; ++t) {
    const u32 in_panel = (t % 4) * 32;
    // Q's descriptors are the same every key block; built here, in the loop, so that the
    // compiler cannot keep all kQkSteps of them live across it (64 bits each).
    const u64 a = desc_advance(q_desc, (t / 4) * Cfg::kBlockM * L::kPanelRowBytes + in_panel);
    const u64 b = smem_desc_sw128(k_tile + (t / 4) * L::kKPanelBytes + in_panel, 16, 1024);
    Wgmma<Cfg::kBlockN>::ss(s, a, b, t > 0);
  }
}

// O += P V: P's k16 step t is the S accumulator's n8 tiles 2t and 2t+1 (no shuffles); V is
// MN-major, 16 keys = 2048 bytes a step, its 64-column panels kKPanelBytes apart.
template <class Cfg>
__device__ __forceinline__ void issue_pv(float (&o)[Cfg::kDvSlice / 8][4],
                                         const u32 (&p)[Cfg::kBlockN / 16][4], u32 v_tile) {
  using L = Sm90FwdLayout<Cfg>;
#pragma unroll
  for (int t = 0; t < L::kPvSteps; ++t)
    Wgmma<Cfg::kDvSlice>::rs(o, p[t], smem_desc_sw128(v_tile + t * 2048, L::kKPanelBytes, 1024),
                             true);
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

// One consumer warp group (index c, rows c*64 .. c*64+63 of the block).
template <class Cfg>
__device__ __forceinline__ void consume(const Smem<Cfg>& sm, const Block& b, const FwdParams& p,
                                        int c) {
  using L = Sm90FwdLayout<Cfg>;
  constexpr int kST = L::kSTiles, kOT = L::kOTiles, kStages = Cfg::kStages;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int rows0 = b.m0 + c * L::kConsumerRows;  // this warp group's first row
  const int row = rows0 + warp * 16 + lane / 4;   // this thread's first row
  const u32 q_tile = sm.q() + c * L::kConsumerRows * L::kPanelRowBytes;
  const int n_blocks = b.tiles;
  KeyTileWalk walk;  // the keys of block n, in the order the producer loaded them

  float o[kOT][4];
  float s[kST][4];
  u32 pf[Cfg::kBlockN / 16][4];
  float row_max[2] = {neg_inf(), neg_inf()};
  float row_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < kOT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

  const u32 my_turn = kSchedBarrier + c, other_turn = kSchedBarrier + (1 - c);
  // Consumer 1's last turn is handed to nobody: consumer 0 has already taken all of its.
  auto pass_turn = [&](int n) {
    if (!(c == 1 && n == n_blocks - 1)) named_arrive(other_turn, kSchedThreads);
  };
  // Softmax of the block of keys from key0 (its S in `s`): mask, running max and sums, P in
  // place; returns in alpha the factor for the O accumulated before this block.
  auto softmax = [&](int key0, float (&alpha)[2]) {
    if (block_needs_mask<Cfg>(rows0, L::kConsumerRows, key0, Cfg::kBlockN, p.seqlen_k, b.diag))
      mask_scores<Cfg>(s, row, key0, p.seqlen_k, b.diag, lane);
    softmax_step(s, row_max, row_sum, p.scale_log2, alpha);
  };
  auto release = [&](int slot) {
    if (lane == 0) mbar_arrive(sm.empty(slot));
  };

  if (n_blocks > 0) {
    if (c == 1) named_arrive(other_turn, kSchedThreads);  // consumer 0 goes first
    mbar_wait(sm.q_full(), 0);

    // Block 0: S only.
    mbar_wait(sm.k_full(0), 0);
    named_sync(my_turn, kSchedThreads);
    wgmma_fence();
    issue_qk<Cfg>(s, q_tile, sm.k(0));
    wgmma_commit();
    pass_turn(0);
    wgmma_wait<0>();
    float alpha[2];
    softmax(walk.next<Cfg>(b.keys), alpha);
    pack_p<Cfg>(pf, s);

    // Block n: issue S(n), then P(n-1) V(n-1); the softmax of S(n) overlaps that product.
    for (int n = 1; n < n_blocks; ++n) {
      const int slot = n % kStages, prev = (n - 1) % kStages;
      const int key0 = walk.next<Cfg>(b.keys);  // read before the waits hide its latency
      mbar_wait(sm.k_full(slot), (n / kStages) & 1);
      named_sync(my_turn, kSchedThreads);
      wgmma_fence();
      issue_qk<Cfg>(s, q_tile, sm.k(slot));
      wgmma_commit();
      mbar_wait(sm.v_full(prev), ((n - 1) / kStages) & 1);
      wgmma_fence();  // each chain opens with a fence, or ptxas inserts one (C7519)
      issue_pv<Cfg>(o, pf, sm.v(prev));
      wgmma_commit();
      pass_turn(n);
      wgmma_wait<1>();  // S(n) has landed
      softmax(key0, alpha);
      wgmma_wait<0>();  // P(n-1) V(n-1) is done: its slot and the P registers are free
      release(prev);
      rescale_rows(o, alpha);
      pack_p<Cfg>(pf, s);
    }

    // The last block's P V.
    const int last = (n_blocks - 1) % kStages;
    mbar_wait(sm.v_full(last), ((n_blocks - 1) / kStages) & 1);
    wgmma_fence();
    issue_pv<Cfg>(o, pf, sm.v(last));
    wgmma_commit();
    wgmma_wait<0>();
    release(last);
  }

  // ---- epilogue: O / l to the output type, LSE in natural log.
  const int tile_row = rows0 + warp * 16;
  u16* o_rows = static_cast<u16*>(p.o) + b.batch * p.o_batch_stride + b.head * p.o_head_stride +
                tile_row * p.o_seq_stride + b.v_col0;
  float* lse = b.split == 0 && p.lse != nullptr
                   ? p.lse + (static_cast<long long>(b.batch) * p.heads_q + b.head) * p.seqlen_q +
                         tile_row
                   : nullptr;
  store_rows<Cfg>(o, row_max, row_sum, o_rows, p.o_seq_stride, tile_row, p.seqlen_q,
                  Cfg::kHeadDimV - b.v_col0, lse, lane);
}

}  // namespace sm90

template <class Cfg>
__device__ __forceinline__ void fwd_sm90(const FwdParams& p, const TmaDesc* tm_q,
                                         const TmaDesc* tm_k, const TmaDesc* tm_v) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const sm90::Smem<Cfg> sm{(raw + 1023u) & ~1023u};

  sm90::Block b;
  // Blocks are launched last-first: under causal masking the last row blocks see the most
  // keys, and starting them first shortens the tail of the grid.
  b.m0 = (gridDim.x - 1 - blockIdx.x) * Cfg::kBlockM;
  b.head = blockIdx.y;
  b.batch = blockIdx.z / Cfg::kDvSplits;
  b.split = blockIdx.z % Cfg::kDvSplits;
  b.kv_head = b.head / p.heads_per_kv;
  b.v_col0 = b.split * Cfg::kDvSlice;
  b.diag = p.seqlen_k - p.seqlen_q;  // bottom-right alignment: row i sees keys <= i + diag
  b.keys = key_steps<Cfg>(p, b.batch, b.head, b.m0,
                          visible_keys<Cfg>(b.m0, Cfg::kBlockM, p.seqlen_k, b.diag));
  b.tiles = visited_steps<Cfg>(b.keys, threadIdx.x % 32);

  // Read from lane 0 so that ptxas sees a warp-uniform value: wgmma in a branch it cannot
  // prove uniform gets serialised (ptxas C7520).
  const int warp_group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(tm_q);
    tma_prefetch_descriptor(tm_k);
    tma_prefetch_descriptor(tm_v);
    mbar_init(sm.q_full(), 1);
    for (int slot = 0; slot < Cfg::kStages; ++slot) {
      mbar_init(sm.k_full(slot), 1);
      mbar_init(sm.v_full(slot), 1);
      mbar_init(sm.empty(slot), 8);  // one arrival per consumer warp
    }
    mbar_fence_init();
  }
  __syncthreads();

  // Each role is one branch, so that ptxas honours setmaxnreg (24 + 2 x 240 registers a
  // thread fill the register file of 384 threads).
  if (warp_group == 0) {
    regs_release<24>();
    if (threadIdx.x == 0 && b.tiles > 0) sm90::produce<Cfg>(sm, b, tm_q, tm_k, tm_v);
  } else {
    regs_claim<240>();
    sm90::consume<Cfg>(sm, b, p, warp_group - 1);
  }
}

}  // namespace fj
