// Kernel parameters of decode's two launches (the split kernel and the combine): the shared
// AttnParams and the cache's layout, plus the scratch between the launches. Compiled by the
// host compiler and by NVRTC, as attn/params.cuh.
#pragma once

#include "../attn/params.cuh"

struct DecParams : AttnParams {
  // Each sequence's count of cached keys (int32 [batch], at most seqlen_k), or null: seqlen_k
  // keys every sequence.
  const int* cache_seqlens;
  // A paged cache, or null: K and V are pages of page_size rows (k_batch_stride and
  // v_batch_stride step from one page to the next), and key j of sequence b is row
  // j % page_size of page block_table[b * max_pages + j / page_size].
  const int* block_table;
  int page_size, max_pages, num_pages;  // page numbers are clamped to [0, num_pages)
  // log2(page_size) when it is a power of two (the usual sizes), else -1: shifts then find a
  // key's page, not a division a row.
  int page_shift;
  // The splits of each (batch, kv head)'s keys. With more than one, split s writes its rows'
  // O (normalised by its own row sums) and LSE in fp32 to the partials, which the combine
  // launch merges through the LSEs into O and LSE.
  int kv_splits;
  float* o_partial;    // [kv_splits, batch, heads_q, seqlen_q, head_dim_v]
  float* lse_partial;  // [kv_splits, batch, heads_q, seqlen_q]
};
