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
// How a warp holds the rows, their products and online softmax is dec_sm80_rows.cuh's: m16
// tiles of rows, or at kBlockM 8 one n8 tile with the products transposed.
//
// Config (from the generated prelude): Element, kHeadDimQk, kHeadDimV, kDqkPad, kDvSlice,
// kDvSplits, kBlockM (packed rows), kBlockN (keys a tile, kWarps slices), kWarps, kStages,
// kAlign, kCausal, kWindow, kWindowLeft, kWindowRight, kPaged.
#pragma once

#include "../arch/sm80.cuh"
#include "../attn/mask.cuh"
#include "../tile/load.cuh"
#include "dec_params.cuh"
#include "dec_sm80_layout.cuh"
#include "dec_sm80_rows.cuh"

namespace fj {

template <class Cfg>
__device__ __forceinline__ void dec_sm80(const DecParams& p) {
  using L = DecSm80Layout<Cfg>;
  using Rows = DecRows<Cfg, Cfg::kBlockM == 8>;
  using Element = typename Cfg::Element;
  using Storage = typename Element::Storage;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kStages = Cfg::kStages;
  constexpr int kW = Cfg::kWarps;

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

  Rows rows;

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

  rows.find_query_rows(r0, packed_rows, group, lane);
  if constexpr (Rows::kHeldQueries) {
    cp_async_wait<kStages - 2>();  // Q came with the first tile
    __syncthreads();
    rows.read_queries(s_q, lane);
  }

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

    rows.tile(s_q, tile_k, tile_v, warp_key0, key0,
              block_needs_mask<Cfg>(q_first, q_count, key0, L::kWarpKeys, seqlen_k, diag),
              seqlen_k, diag, p.scale_log2, lane);
    if (find_next) store_key_offsets(j + kStages, next_offsets);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the ring, which now holds the merge

  // ---- merge the warps: each writes its O and row statistics ...
  float* m_o = reinterpret_cast<float*>(smem_raw);
  float* m_max = m_o + L::kMergeOFloats;  // [warp][row], then rescaled to [warp][row] weights
  float* m_sum = m_max + kW * kBM;
  rows.store_merge(m_o, m_max, m_sum, warp, lane);
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
