// One checked and timed decode call on the GPU: new query rows against a KV cache, dense or
// paged, with ragged lengths (0 included). Cache rows past each sequence's length are NaN,
// so a kernel that reads them makes NaN; the outputs are poisoned; O and LSE are compared
// with the fp64 reference of each sequence on its own keys, under the forward's tolerances.
#pragma once

#include <vector>

#include "flashjit/flashjit.h"
#include "verify/attention_run.h"

namespace flashjit::verify {

struct DecodeShape {
  int batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1;
  int seqlen_k = 1;  // the cache's capacity a sequence: the longest length
  // Each sequence's cached keys (<= seqlen_k), passed as ForwardArgs::cache_seqlens; empty:
  // every sequence holds seqlen_k and the call passes none.
  std::vector<int> cache_seqlens;
  int page_size = 0;  // > 0: a paged cache, its pages in shuffled order; 0: dense
};

// "b=2 hq=8 hkv=2 sq=1 cache=[17,0] paged 16"
std::string describe(const DecodeShape& shape);

// The K/V bytes the call must read (each sequence's keys, K and V): the bandwidth's base.
double decode_cache_bytes(const Spec& spec, const DecodeShape& shape);

// Throws Error(Shape) for a shape that does not fit (sizes, lengths above seqlen_k),
// Error(NoDevice) without a GPU, and whatever Kernel::forward throws. RunResult::tflops
// holds the cache bandwidth in TB/s when timed.
RunResult run_decode(Runtime& runtime, const Spec& spec, const DecodeShape& shape,
                     const RunOptions& options);

// Kernel::merge checked: the forward over keys [0, split_key) and over [split_key, seqlen_k)
// of a dense shape (no cache lengths, no mask: each half alone is plain attention), merged in
// place into the first half's O and LSE, against the fp64 reference over all the keys.
RunResult run_merge(Runtime& runtime, const Spec& spec, const DecodeShape& shape, int split_key,
                    const RunOptions& options);

}  // namespace flashjit::verify
