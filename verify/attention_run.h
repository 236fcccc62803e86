// One checked and timed run of a forward kernel on the GPU, shared by `flashjit run` and the
// GPU tests: inputs (random, or the user's), outputs poisoned with NaN before the kernel
// runs, O and LSE compared with the fp64 reference, the kernel timed with CUDA events.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashjit/flashjit.h"
#include "verify/compare.h"
#include "verify/random.h"

namespace flashjit::verify {

// How Q, K, V and O sit in device memory. Every layout keeps FlashAttention's dimension
// order [batch, seq, heads, dim] with a unit dim stride; only the other strides change.
enum class Layout {
  Contiguous,   // densely packed tensors
  PaddedHeads,  // each head row followed by `head_pad` unused elements (Q, K, V and O)
  PackedQkv,    // Q, K, V as views into one [batch, seq, heads_q + 2 * heads_kv, d] buffer
                // (seqlen_q == seqlen_k, head_dim_qk == head_dim_v); O contiguous
};
const char* to_string(Layout layout);

struct Shape {
  int batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1;
  Layout layout = Layout::Contiguous;
  int head_pad = 8;  // PaddedHeads only
  // mask: block_sparse only: the layout as a dense block matrix [layout_batch, layout_heads,
  // ceil(seqlen_q / block_q), ceil(seqlen_k / block_k)] (nonzero: visible), layout_batch 1
  // or batch and layout_heads 1 or heads_q. Empty: a random layout of density 1/2 drawn
  // from the run's seed, shared by every batch and head.
  std::vector<uint8_t> block_visible;
  int layout_batch = 1, layout_heads = 1;
  // A variable-length batch: each sequence's lengths (see varlen_shape); empty: every
  // sequence has seqlen_q / seqlen_k. Contiguous or PaddedHeads layout only.
  std::vector<int> seqlens_q, seqlens_k;
};

// A variable-length batch of seqlens_q.size() sequences (packed tensors, cu_seqlens); the
// shape's seqlen_q / seqlen_k are the longest lengths (at least 1, which the grid needs).
Shape varlen_shape(int heads_q, int heads_kv, std::vector<int> seqlens_q,
                   std::vector<int> seqlens_k);

// The user's tensors, contiguous [batch, seq, heads, dim], already rounded to the dtype;
// d_o (O's shape) only for the backward run.
struct UserInputs {
  std::vector<float> q, k, v, d_o;
};

struct RunOptions {
  int warmup = 3;   // untimed launches before timing
  int iters = 20;   // timed launches (median reported); 0: no timing
  std::optional<uint64_t> seed;  // random inputs: a fresh seed unless given
  Distribution distribution = Distribution::Normal;
  bool keep_outputs = false;  // fill RunResult::o and ::lse
};

// Tolerances for O against the fp64 reference, chosen per dtype (see attention_run.cpp).
struct Tolerances {
  Tolerance o;
  double o_rel_l2 = 0;  // bound on ||O - ref|| / ||ref||
  Tolerance lse;
};
Tolerances tolerances_for(DType dtype);

struct RunResult {
  std::string kernel;  // kernel name of the variant launched
  ErrorStats o, lse;
  int64_t o_outside_writes = 0;  // poisoned padding / guard elements the kernel overwrote
  bool passed = false;
  std::string failure;  // why it failed, "" when passed
  uint64_t seed = 0;    // of the random inputs (0 with user inputs)
  double time_ms = 0;   // median over RunOptions::iters launches
  double tflops = 0;
  std::vector<float> o_values;    // [batch, seqlen_q, heads_q, head_dim_v] if keep_outputs
  std::vector<float> lse_values;  // [batch, heads_q, seqlen_q] if keep_outputs
};

// Why `result` fails `tolerances` ("" when it passes): NaN, elements over the bound, the L2
// error, LSE infinities, writes outside the outputs.
std::string describe_failure(const RunResult& result, const Tolerances& tolerances);

// Exact FLOP count of the forward pass (DESIGN.md): 2 * (Dqk + Dv) per visible (query, key)
// pair, over every batch and query head. A block_sparse shape needs its block_visible.
double forward_flops(const Spec& spec, const Shape& shape);

// Throws Error(Shape) if the shape does not fit the layout, Error(NoDevice) without a GPU,
// and whatever Kernel::forward throws.
RunResult run_attention(Runtime& runtime, const Spec& spec, const Shape& shape,
                        const RunOptions& options, const UserInputs* inputs = nullptr);

}  // namespace flashjit::verify
