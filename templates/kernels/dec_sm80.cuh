// Decode (Flash-Decoding) for sm_80 and later: a few query rows against a long K/V cache, on
// the mma.sync instructions every target has. Decode is bound by reading the cache, so the
// kernel's work is to keep every multiprocessor reading it, once.
//
// One CTA computes kBlockM packed rows of one (batch, kv head) over one split of its keys.
// The packed rows are the query rows of the whole GQA group: packed row r is query row
// r / group of query head kv_head * group + r % group, so K and V are read once per KV head
// however many query heads share them. Every warp holds all the rows and takes its own
// kBlockN / kWarps keys of each key tile, with its own online softmax; after the key loop the
// warps' states merge through shared memory in a fixed order (deterministic). K/V tiles
// stream through a kStages-deep cp.async ring as in the forward.
//
// With one split the CTA writes O and LSE; with several (DecParams::kv_splits), each writes
// its rows' O / l and LSE in fp32 to the partials and the combine launch
// (kernels/dec_combine.cuh) merges them. Splits take whole key tiles of the band the rows
// can see. A paged cache (kPaged) reads key j from row j % page_size of page
// block_table[b][j / page_size]. Each key's offsets in K and V are found once per tile, a
// tile before its copies are issued, into a shared ring beside K and V: found per copied row,
// the block table's read stood between every row's address and its copy, and the warps spent
// each tile waiting on those reads instead of on the cache.
//
// Config (from the generated prelude): Element, kHeadDimQk, kHeadDimV, kDqkPad, kDvSlice,
// kDvSplits, kBlockM (packed rows), kBlockN (keys a tile, kWarps slices), kWarps, kStages,
// kAlign, kCausal, kWindow, kWindowLeft, kWindowRight, kPaged.
#pragma once

#include "../arch/sm80.cuh"
#include "../attn/mask.cuh"
#include "../attn/softmax.cuh"
#include "../tile/budgets.cuh"
#include "../tile/element.cuh"
#include "../tile/load.cuh"
#include "../tile/warp_products.cuh"
#include "dec_params.cuh"

namespace fj {

template <class Cfg>
struct DecSm80Layout {
  using Element = typename Cfg::Element;
  static constexpr int kThreads = Cfg::kWarps * 32;
  static constexpr int kMTiles = Cfg::kBlockM / 16;                // m16 tiles, every warp
  static constexpr int kWarpKeys = Cfg::kBlockN / Cfg::kWarps;      // keys a warp, a tile
  static constexpr int kSTiles = kWarpKeys / 8;                    // n8 tiles of S
  static constexpr int kOTiles = Cfg::kDvSlice / 8;                // n8 tiles of O
  static constexpr int kQkSteps = Cfg::kDqkPad / Element::kMmaK;   // k steps of Q K^T
  static constexpr int kQkStride = budget::conflict_free_stride(Cfg::kDqkPad, Element::kBytes);
  static constexpr int kVStride = budget::conflict_free_stride(Cfg::kDvSlice, Element::kBytes);
  static constexpr int kQElems = Cfg::kBlockM * kQkStride;
  static constexpr int kKElems = Cfg::kBlockN * kQkStride;
  static constexpr int kVElems = Cfg::kBlockN * kVStride;
  static constexpr int kPageRowsPerThread = (Cfg::kBlockN + kThreads - 1) / kThreads;
  // Paged rows whose addresses a thread finds before their copies (tile/load.cuh).
  static constexpr int kPagedRowGroup = Cfg::kAlign != 16 ? 1 : Cfg::kDqkPad >= 256 ? 2 : 4;
  // Row steps of a K or V tile unrolled (tile/load.cuh). Head dims up to 128 copy a 64-key
  // tile in 8 steps; wider ones in 16, and unrolling all 16 of K and V took 255 registers
  // and spilled at V slices of 256, dense and paged (paged d256 runs 5% slower capped, but
  // spilled 8-16 bytes uncapped: bench/NOTES.md entry 26).
  static constexpr int kLoadUnroll = 8;
  // Tiles whole inside the cache copy 16-byte chunks without bounds or zero-fill
  // (tile/load.cuh's load_whole_tile and load_whole_rows): rows on 16 bytes, no padded
  // columns, and one chunk a thread a row step.
  static constexpr bool kWholeRows =
      Cfg::kAlign == 16 && Cfg::kHeadDimQk == Cfg::kDqkPad &&
      pow2_ceil(Cfg::kDqkPad / 8) <= kThreads && pow2_ceil(Cfg::kDvSlice / 8) <= kThreads;
  // How far (log2) a block's max may pass a row's running max before it moves: O's rescale
  // (a multiply per accumulator) was 14% of the kernel's instructions, and a warp skips it
  // for a tile where none of its rows' maxima moved, after the first tiles nearly always.
  static constexpr int kMaxSlack = 8;
  // The merge's fp32 rows: each warp's O, then each warp's row max and row sum.
  static constexpr int kMergeStride = budget::dec_sm80_merge_stride(Cfg::kDvSlice);
  static constexpr int kMergeOFloats = Cfg::kWarps * Cfg::kBlockM * kMergeStride;
  static constexpr int kSharedBytes =
      budget::dec_sm80_shared_bytes(Element::kBytes, Cfg::kDqkPad, Cfg::kDvSlice, Cfg::kBlockM,
                                    Cfg::kBlockN, Cfg::kWarps, Cfg::kStages);
  static_assert(kSharedBytes >= Element::kBytes * (kQElems + Cfg::kStages * (kKElems + kVElems)) +
                                   budget::dec_sm80_key_offsets_bytes(Cfg::kBlockN, Cfg::kStages),
                "the budget holds Q, the K/V ring and the paged keys' offsets");
  static_assert(Element::kBytes * (kQElems + Cfg::kStages * (kKElems + kVElems)) % 16 == 0,
                "the paged keys' offsets are 16-byte aligned");
  static_assert(kSharedBytes >= 4 * (kMergeOFloats + 2 * Cfg::kWarps * Cfg::kBlockM),
                "the budget holds the merge");

  static_assert(Cfg::kBlockM % 16 == 0, "whole m16 tiles of packed rows");
  static_assert(kWarpKeys % 16 == 0, "each warp's keys are whole k16 steps");
  static_assert(Cfg::kDqkPad % 16 == 0 && Cfg::kDvSlice % 16 == 0, "padded head dims");
  static_assert(Cfg::kStages >= 2, "the pipeline needs two stages");
  static_assert(Element::kBytes == 2 && Element::kMmaK == 16,
                "the fragments below are ldmatrix's b16 and mma.sync's m16n8k16");
};

template <class Cfg>
__device__ __forceinline__ void dec_sm80(const DecParams& p) {
  using L = DecSm80Layout<Cfg>;
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kStages = Cfg::kStages;
  constexpr int kMT = L::kMTiles, kST = L::kSTiles, kOT = L::kOTiles, kW = Cfg::kWarps;

  // The combine may launch once every CTA of this grid has started: its CTAs wait for this
  // grid's end (wait_for_previous_launch), so only its launch and set-up overlap this grid.
  allow_dependent_launch();

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Storage* s_q = reinterpret_cast<Storage*>(smem_raw);
  Storage* s_k = s_q + L::kQElems;
  Storage* s_v = s_k + kStages * L::kKElems;
  // A paged cache's keys: (K offset, V offset) in elements, a key.
  longlong2* s_key_offsets = reinterpret_cast<longlong2*>(s_v + kStages * L::kVElems);

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int kv_head = blockIdx.y;
  const int splits = p.kv_splits;
  const int batch = blockIdx.z / (Cfg::kDvSplits * splits);
  const int split = blockIdx.z / Cfg::kDvSplits % splits;
  const int v_split = blockIdx.z % Cfg::kDvSplits;
  const int group = p.heads_per_kv;
  const int packed_rows = p.seqlen_q * group;
  const int r0 = blockIdx.x * kBM;  // this CTA's first packed row
  const int v_col0 = v_split * Cfg::kDvSlice;
  const int v_cols = Cfg::kHeadDimV - v_col0;
  const int seqlen_q = p.seqlen_q;
  const int seqlen_k =
      p.cache_seqlens != nullptr ? max(0, min(p.cache_seqlens[batch], p.seqlen_k)) : p.seqlen_k;
  // The new queries are the cache's last rows (bottom-right): row i sees key j iff j <= i + diag.
  const int diag = seqlen_k - seqlen_q;

  // The key tiles of this split: whole tiles of the band the CTA's query rows can see.
  const int q_first = r0 / group;
  const int q_count = (min(r0 + kBM, packed_rows) - 1) / group - q_first + 1;
  const KeyRange band = visible_keys<Cfg>(q_first, q_count, seqlen_k, diag);
  const int band_tiles = band.end > band.begin ? (band.end - band.begin + kBN - 1) / kBN : 0;
  const int split_tiles = (band_tiles + splits - 1) / splits;
  const int first_tile = min(band_tiles, split * split_tiles);
  const int n_blocks = min(band_tiles, first_tile + split_tiles) - first_tile;
  const int key_begin = band.begin + first_tile * kBN;

  const Storage* q = static_cast<const Storage*>(p.q) + batch * p.q_batch_stride;
  const Storage* k = static_cast<const Storage*>(p.k) + kv_head * p.k_head_stride;
  const Storage* v = static_cast<const Storage*>(p.v) + kv_head * p.v_head_stride + v_col0;
  if constexpr (!Cfg::kPaged) {
    k += batch * p.k_batch_stride;
    v += batch * p.v_batch_stride;
  }
  const int* pages = Cfg::kPaged ? p.block_table + static_cast<long long>(batch) * p.max_pages
                                 : nullptr;
  // Where cache row `key` (< seqlen_k) starts in K and in V, in elements: its page's start
  // plus its row within the page. Found once a key, so each copy adds one offset.
  auto key_offsets_of = [&](int key) -> longlong2 {
    const bool pow2 = p.page_shift >= 0;
    const int index = pow2 ? key >> p.page_shift : key / p.page_size;
    const int row = pow2 ? key & (p.page_size - 1) : key % p.page_size;
    const long long page = min(max(pages[index], 0), p.num_pages - 1);
    return make_longlong2(page * p.k_batch_stride + static_cast<long long>(row) * p.k_seq_stride,
                          page * p.v_batch_stride + static_cast<long long>(row) * p.v_seq_stride);
  };
  // This thread's keys of tile `step` (kPageRowsPerThread, kThreads apart), found now and
  // stored later so the block table's latency hides behind a tile's products.
  auto find_key_offsets = [&](int step, longlong2 (&found)[L::kPageRowsPerThread]) {
#pragma unroll
    for (int i = 0; i < L::kPageRowsPerThread; ++i) {
      const int key = key_begin + step * kBN + tid + i * L::kThreads;
      const bool in = key < seqlen_k && tid + i * L::kThreads < kBN;
      found[i] = in ? key_offsets_of(key) : make_longlong2(0, 0);
    }
  };
  auto store_key_offsets = [&](int step, const longlong2 (&found)[L::kPageRowsPerThread]) {
#pragma unroll
    for (int i = 0; i < L::kPageRowsPerThread; ++i) {
      const int r = tid + i * L::kThreads;
      if (r < kBN) s_key_offsets[(step % kStages) * kBN + r] = found[i];
    }
  };

  float acc_o[kMT][kOT][4];
  float row_max[kMT][2];  // this warp's running max of scale*log2(e)*s over its keys
  float row_sum[kMT][2];  // this thread's share of this warp's row sum
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int ot = 0; ot < kOT; ++ot)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][ot][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = neg_inf();
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  auto load_kv = [&](int step) {
    const int key0 = key_begin + step * kBN;
    Storage* k_dst = s_k + (step % kStages) * L::kKElems;
    Storage* v_dst = s_v + (step % kStages) * L::kVElems;
    // Every tile but a split's last lies whole in the cache: its copies skip the bounds and
    // the zero-fill.
    const bool whole = seqlen_k - key0 >= kBN && v_cols >= Cfg::kDvSlice;
    if constexpr (Cfg::kPaged) {
      const longlong2* offsets = s_key_offsets + (step % kStages) * kBN;
      auto k_row = [&](int r) { return k + offsets[r].x; };
      auto v_row = [&](int r) { return v + offsets[r].y; };
      if constexpr (L::kWholeRows) {
        if (whole) {
          load_whole_rows<kBN, Cfg::kDqkPad, L::kQkStride, L::kThreads, L::kPagedRowGroup,
                          L::kLoadUnroll>(k_dst, k_row, tid);
          load_whole_rows<kBN, Cfg::kDvSlice, L::kVStride, L::kThreads, L::kPagedRowGroup,
                          L::kLoadUnroll>(v_dst, v_row, tid);
          return;
        }
      }
      load_rows<kBN, Cfg::kDqkPad, L::kQkStride, L::kThreads, Cfg::kAlign, L::kPagedRowGroup,
                L::kLoadUnroll>(k_dst, k_row, k, seqlen_k - key0, Cfg::kHeadDimQk, tid);
      load_rows<kBN, Cfg::kDvSlice, L::kVStride, L::kThreads, Cfg::kAlign, L::kPagedRowGroup,
                L::kLoadUnroll>(v_dst, v_row, v, seqlen_k - key0, v_cols, tid);
    } else {
      // A dense cache's rows ask L2 for whole lines (1-2.5% on the H200, entry 28); paged
      // rows, timed once each way, gained nothing clear.
      if constexpr (L::kWholeRows) {
        if (whole) {
          load_whole_tile<kBN, Cfg::kDqkPad, L::kQkStride, L::kThreads, L::kLoadUnroll, true>(
              k_dst, k + key0 * p.k_seq_stride, p.k_seq_stride, tid);
          load_whole_tile<kBN, Cfg::kDvSlice, L::kVStride, L::kThreads, L::kLoadUnroll, true>(
              v_dst, v + key0 * p.v_seq_stride, p.v_seq_stride, tid);
          return;
        }
      }
      load_tile<kBN, Cfg::kDqkPad, L::kQkStride, L::kThreads, Cfg::kAlign, L::kLoadUnroll, true>(
          k_dst, k + key0 * p.k_seq_stride, p.k_seq_stride, seqlen_k - key0, Cfg::kHeadDimQk, tid);
      load_tile<kBN, Cfg::kDvSlice, L::kVStride, L::kThreads, Cfg::kAlign, L::kLoadUnroll, true>(
          v_dst, v + key0 * p.v_seq_stride, p.v_seq_stride, seqlen_k - key0, v_cols, tid);
    }
  };

  // Prologue: a paged cache's rows of the first kStages tiles; the packed Q rows and the first
  // kStages-1 K/V tiles, one commit group each (empty ones included, so "tile j has landed" is
  // always cp.async.wait_group(kStages - 2)).
  if constexpr (Cfg::kPaged) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      longlong2 found[L::kPageRowsPerThread];
      find_key_offsets(s, found);
      store_key_offsets(s, found);
    }
    __syncthreads();
  }
  load_rows<kBM, Cfg::kDqkPad, L::kQkStride, L::kThreads, Cfg::kAlign>(
      s_q,
      [&](int r) {
        const int packed = r0 + r;
        return q + (packed / group) * p.q_seq_stride +
               (kv_head * group + packed % group) * p.q_head_stride;
      },
      q, packed_rows - r0, Cfg::kHeadDimQk, tid);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_blocks) load_kv(s);
    cp_async_commit();
  }

  // The query row of each of this thread's accumulator rows (packed rows past the end repeat
  // the last query row: their scores are never stored).
  int q_rows[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      q_rows[mt][half] = min(r0 + mt * 16 + lane / 4 + half * 8, packed_rows - 1) / group;

  const int warp_key0 = warp * L::kWarpKeys;  // this warp's first key within each tile
  for (int j = 0; j < n_blocks; ++j) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (j + kStages - 1 < n_blocks) load_kv(j + kStages - 1);
    cp_async_commit();
    // Tile j + kStages's offsets go to the ring slot tile j's copies read before this step's
    // barrier.
    longlong2 next_offsets[L::kPageRowsPerThread];
    const bool find_next = Cfg::kPaged && j + kStages < n_blocks;
    if (find_next) find_key_offsets(j + kStages, next_offsets);
    const int key0 = key_begin + j * kBN + warp_key0;
    const Storage* tile_k = s_k + (j % kStages) * L::kKElems;
    const Storage* tile_v = s_v + (j % kStages) * L::kVElems;

    // ---- S = Q K^T over this warp's keys
    float s[kMT][kST][4];
    warp_scores<Element, kMT, kST, L::kQkSteps, L::kQkStride>(s, s_q, 0, tile_k, warp_key0, lane);

    // ---- mask: the cache's end, the causal diagonal and the window, per packed row
    if (block_needs_mask<Cfg>(q_first, q_count, key0, L::kWarpKeys, seqlen_k, diag)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        mask_scores_of_rows<Cfg>(s[mt], q_rows[mt], key0, seqlen_k, diag, lane);
    }

    // ---- online softmax of this warp's keys
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      float alpha[2];
      const bool raised =
          softmax_step<kST, L::kMaxSlack>(s[mt], row_max[mt], row_sum[mt], p.scale_log2, alpha);
      if (__any_sync(0xffffffffu, raised)) rescale_rows(acc_o[mt], alpha);
    }

    // ---- O += P V over this warp's keys
    warp_values<Element, kMT, kST, kOT, L::kVStride>(acc_o, s, tile_v, warp_key0, lane);
    if (find_next) store_key_offsets(j + kStages, next_offsets);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the ring, which now holds the merge

  // ---- merge the warps: each writes its O and row statistics ...
  float* m_o = reinterpret_cast<float*>(smem_raw);
  float* m_max = m_o + L::kMergeOFloats;  // [warp][row], then rescaled to [warp][row] weights
  float* m_sum = m_max + kW * kBM;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = mt * 16 + lane / 4 + half * 8;
      float* o_row = m_o + (warp * kBM + row) * L::kMergeStride;
#pragma unroll
      for (int ot = 0; ot < kOT; ++ot) {
        const int col = ot * 8 + (lane % 4) * 2;
        o_row[col] = acc_o[mt][ot][half * 2];
        o_row[col + 1] = acc_o[mt][ot][half * 2 + 1];
      }
      float l = row_sum[mt][half];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      if (lane % 4 == 0) {
        m_max[warp * kBM + row] = row_max[mt][half];
        m_sum[warp * kBM + row] = l;
      }
    }
  __syncthreads();

  // ... then one thread a row turns the warps' maxima into weights (1 / l folded in) and
  // writes the row's LSE ...
  const bool one_split = splits == 1;
  const long long rows_total = static_cast<long long>(p.batch) * p.heads_q * seqlen_q;
  if (tid < kBM && r0 + tid < packed_rows) {
    const int row = tid, packed = r0 + row;
    float m = neg_inf();
#pragma unroll
    for (int w = 0; w < kW; ++w) m = fmaxf(m, m_max[w * kBM + row]);
    const float base = m == neg_inf() ? 0.f : m;
    float l = 0.f;
#pragma unroll
    for (int w = 0; w < kW; ++w) l += exp2_approx(m_max[w * kBM + row] - base) * m_sum[w * kBM + row];
    const float inv_l = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int w = 0; w < kW; ++w) m_max[w * kBM + row] = exp2_approx(m_max[w * kBM + row] - base) * inv_l;
    constexpr float kLn2 = 0.6931471805599453f;
    const float lse = l > 0.f ? (m + log2f(l)) * kLn2 : neg_inf();
    const int head = kv_head * group + packed % group;
    const long long lse_row = (static_cast<long long>(batch) * p.heads_q + head) * seqlen_q +
                              packed / group;
    if (v_split == 0) {
      if (!one_split) p.lse_partial[split * rows_total + lse_row] = lse;
      else if (p.lse != nullptr) p.lse[lse_row] = lse;
    }
  }
  __syncthreads();

  // ... and every thread sums the warps' weighted O, column-major so stores coalesce.
  for (int i = tid; i < kBM * Cfg::kDvSlice; i += L::kThreads) {
    const int row = i / Cfg::kDvSlice, col = i % Cfg::kDvSlice;
    const int packed = r0 + row;
    if (packed >= packed_rows || col >= v_cols) continue;
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kW; ++w) o += m_max[w * kBM + row] * m_o[(w * kBM + row) * L::kMergeStride + col];
    const int q_row = packed / group, head = kv_head * group + packed % group;
    if (one_split) {
      Storage* out = static_cast<Storage*>(p.o) + batch * p.o_batch_stride +
                     q_row * p.o_seq_stride + head * p.o_head_stride + v_col0 + col;
      *out = static_cast<Storage>(Element::pack(o, 0.f) & 0xffffu);
    } else {
      const long long lse_row =
          (static_cast<long long>(batch) * p.heads_q + head) * seqlen_q + q_row;
      p.o_partial[(split * rows_total + lse_row) * Cfg::kHeadDimV + v_col0 + col] = o;
    }
  }
}

}  // namespace fj
