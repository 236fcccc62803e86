// The block-mask and varlen cases of the GPU suite (issue 6). Every case is checked like the
// rest of the grid: O and LSE of the kernel against the fp64 reference with the equivalent
// dense mask (verify/reference.h), on fresh random inputs. Specs are built in C++.
#include <algorithm>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "tests/gpu/gpu_grid.h"

namespace flashjit::gpu_test {

namespace {

using verify::Shape;

// A grid spec under another name.
Spec base_spec(const std::string& name, int dqk, int dv, DType dtype, bool causal) {
  Spec spec = make_spec(dqk, dv, dtype, causal);
  spec.name = name;
  return spec;
}

Spec sparse_spec(int dqk, int dv, DType dtype, bool causal, int block_q, int block_k,
                 Tiles tiles = {}) {
  Spec spec = base_spec(fmt::format("mask_qk{}_v{}_{}{}_bsparse{}x{}", dqk, dv, to_string(dtype),
                                    causal ? "_causal" : "", block_q, block_k),
                        dqk, dv, dtype, causal);
  spec.mask = MaskKind::BlockSparse;
  spec.block_q = block_q;
  spec.block_k = block_k;
  spec.tiles = tiles;
  // Given tiles are the sm80 kernel's (block_m, warps): they pin that kernel on Hopper too.
  spec.warp_specialization = tiles.is_auto();
  spec.validate();
  return spec;
}

struct PatternParams {
  PatternKind kind;
  int block, window, stride, global;
};

Spec pattern_spec(int d, DType dtype, bool causal, PatternParams p) {
  Spec spec = base_spec("", d, d, dtype, causal);
  spec.mask = MaskKind::Pattern;
  spec.pattern = p.kind;
  spec.block_q = spec.block_k = p.block;
  spec.pattern_window = p.window;
  spec.pattern_stride = p.stride;
  spec.pattern_global = p.global;
  spec.name = fmt::format("mask_qk{}_{}{}_{}w{}s{}g{}b{}", d, to_string(dtype),
                          causal ? "_causal" : "", to_string(p.kind), p.window, p.stride,
                          p.global, p.block);
  spec.validate();
  return spec;
}

int blocks(int n, int block) { return (n + block - 1) / block; }

// A dense block matrix [layout_batch, layout_heads, q_blocks, k_blocks] of the given density
// (fixed seed: the inputs are what varies between runs), with query block `empty_row` of
// every (batch, head) seeing nothing when it exists.
Shape with_random_layout(const Spec& spec, Shape s, int layout_batch, int layout_heads,
                         double density, int empty_row, uint64_t seed) {
  const int nq = blocks(s.seqlen_q, spec.block_q), nk = blocks(s.seqlen_k, spec.block_k);
  std::mt19937_64 engine(seed);
  std::bernoulli_distribution visible(density);
  s.layout_batch = layout_batch;
  s.layout_heads = layout_heads;
  s.block_visible.resize(static_cast<size_t>(layout_batch) * layout_heads * nq * nk);
  for (size_t e = 0; e < s.block_visible.size(); ++e) {
    const int qb = static_cast<int>(e / nk % nq);
    s.block_visible[e] = qb == empty_row ? 0 : (visible(engine) ? 1 : 0);
  }
  return s;
}

// Every block visible: the block-sparse kernel must then equal the dense one.
Shape with_full_layout(const Spec& spec, Shape s) {
  s.block_visible.assign(
      static_cast<size_t>(blocks(s.seqlen_q, spec.block_q)) * blocks(s.seqlen_k, spec.block_k), 1);
  return s;
}

}  // namespace

// On an H200 the specs whose block_q is a multiple of 128 run the sm90 kernel (the rest, and
// the "sm80 kernel" test cases, the sm80 one).
std::vector<Spec> block_sparse_specs() {
  return {
      // Kernel tiles smaller than the mask blocks (sm80: m128 n64 in 128 x 128 blocks).
      sparse_spec(64, 64, DType::BF16, false, 128, 128),
      // Small blocks: the heuristic shrinks its tiles to 64 x 32.
      sparse_spec(128, 128, DType::F16, true, 64, 32),
      // Query blocks of four CTAs; key blocks of one tile.
      sparse_spec(100, 100, DType::BF16, false, 256, 64, Tiles{64, 64, 4, 2}),
      // Key blocks of four tiles; qk != v; causal.
      sparse_spec(192, 128, DType::F16, true, 128, 256),
      // Blocks of one m16 tile: 16 x 16, one warp.
      sparse_spec(72, 72, DType::BF16, true, 16, 16),
      // Query blocks of two 128-row CTAs, key blocks of one sm90 tile (n64 at d 256).
      sparse_spec(256, 256, DType::BF16, false, 256, 64),
      // Key blocks of 48: sm90 tiles of 48 keys (the widest block_n dividing them).
      sparse_spec(128, 128, DType::BF16, true, 128, 48),
  };
}

std::vector<GridCase> block_sparse_cases() {
  std::vector<GridCase> cases;
  uint64_t seed = 1;
  for (const Spec& spec : block_sparse_specs()) {
    // Sequence ends inside mask blocks; GQA; one layout per batch and head, 30% dense, query
    // block 1 of each (batch, head) empty (O = 0, LSE = -inf unless causal hides it anyway).
    cases.push_back({spec, with_random_layout(spec, shape(2, 4, 2, 1000, 1037), 2, 4, 0.3, 1,
                                              seed++)});
    // Broadcast over batch (one layout per head), then over heads (one per batch).
    cases.push_back({spec, with_random_layout(spec, shape(3, 2, 1, 300, 257), 1, 2, 0.5, -1,
                                              seed++)});
    cases.push_back({spec, with_random_layout(spec, shape(2, 3, 3, 257, 300), 2, 1, 0.5, -1,
                                              seed++)});
    // The run's own random layout (broadcast over both, density 1/2, drawn from the seed).
    cases.push_back({spec, shape(1, 2, 1, 4097, 4097)});
    // Every block visible: equal to attention without a block mask.
    cases.push_back({spec, with_full_layout(spec, shape(1, 2, 2, 1000, 1000))});
    // Nothing visible anywhere: every row O = 0, LSE = -inf.
    cases.push_back({spec, with_random_layout(spec, shape(1, 1, 1, 129, 130), 1, 1, 0.0, -1,
                                              seed++)});
    // Decoding: one query row against a long sparse key sequence.
    cases.push_back({spec, with_random_layout(spec, shape(2, 2, 1, 1, 1000), 2, 1, 0.4, -1,
                                              seed++)});
  }
  return cases;
}

std::vector<Spec> pattern_specs() {
  using K = PatternKind;
  return {
      pattern_spec(64, DType::BF16, false, {K::Local, 64, 1, 0, 0}),
      pattern_spec(128, DType::F16, true, {K::Local, 128, 2, 0, 0}),
      pattern_spec(64, DType::F16, false, {K::Local, 32, 0, 0, 0}),  // the diagonal blocks only
      pattern_spec(96, DType::BF16, false, {K::Strided, 32, 0, 3, 0}),
      pattern_spec(100, DType::F16, true, {K::Strided, 64, 0, 2, 0}),
      pattern_spec(64, DType::F16, false, {K::Strided, 128, 0, 1, 0}),  // stride 1: dense
      pattern_spec(64, DType::F16, false, {K::GlobalLocal, 64, 1, 0, 1}),
      pattern_spec(128, DType::BF16, true, {K::GlobalLocal, 128, 0, 0, 2}),
      pattern_spec(256, DType::BF16, false, {K::GlobalLocal, 64, 3, 0, 2}),
      // Blocks of two sm90 CTAs and of two sm90 key tiles (n128 at d 96, n64 at d 200).
      pattern_spec(96, DType::BF16, true, {K::Strided, 256, 0, 2, 0}),
      pattern_spec(200, DType::F16, false, {K::GlobalLocal, 128, 1, 0, 1}),
      // The largest counts a spec allows (2^30 blocks): block arithmetic must not wrap.
      pattern_spec(64, DType::BF16, true, {K::Local, 64, 1 << 30, 0, 0}),
      pattern_spec(128, DType::F16, false, {K::Strided, 64, 0, 1 << 30, 0}),
      pattern_spec(96, DType::BF16, false, {K::GlobalLocal, 32, 1 << 30, 0, 1 << 30}),
  };
}

std::vector<GridCase> pattern_cases() {
  const std::vector<Shape> shapes = {
      shape(1, 2, 1, 1000, 1037),  // pattern blocks cut by the sequence ends, GQA
      shape(2, 3, 3, 300, 257),    // seqlen_q > seqlen_k: causal hides whole query blocks
      shape(2, 2, 2, 257, 700),    // seqlen_q < seqlen_k: key blocks past every query block
      shape(1, 1, 1, 4097, 4097),  // many blocks skipped
      shape(1, 2, 2, 1, 1000),     // decoding: query block 0 only
  };
  std::vector<GridCase> cases;
  for (const Spec& spec : pattern_specs())
    for (const Shape& s : shapes) cases.push_back({spec, s});
  return cases;
}

std::vector<GridCase> varlen_cases() {
  std::vector<Spec> specs = {
      base_spec("varlen_qk64_bf16_causal", 64, 64, DType::BF16, true),
      base_spec("varlen_qk128_fp16", 128, 128, DType::F16, false),
      base_spec("varlen_qk192_v128_bf16", 192, 128, DType::BF16, false),
  };
  Spec window = base_spec("varlen_qk100_fp16_window37_5", 100, 100, DType::F16, false);
  window.mask = MaskKind::SlidingWindow;
  window.window_left = 37;
  window.window_right = 5;
  specs.push_back(window);
  specs.push_back(block_sparse_specs()[0]);
  specs.push_back(block_sparse_specs()[1]);
  specs.push_back(pattern_specs()[1]);
  specs.push_back(pattern_specs()[6]);
  for (Spec& spec : specs) spec.validate();

  // Lengths: odd, 0 and 1, a sequence with keys but no queries and one with queries but no
  // keys (its rows: O = 0, LSE = -inf), seqlen_q != seqlen_k per sequence.
  const std::vector<Shape> shapes = {
      verify::varlen_shape(4, 2, {1000, 0, 1, 17, 300}, {1037, 5, 0, 17, 257}),
      verify::varlen_shape(3, 3, {129, 1, 64, 513}, {129, 1, 64, 513}),
      verify::varlen_shape(2, 1, {0, 0}, {3, 0}),  // no query rows at all
  };
  std::vector<GridCase> cases;
  for (const Spec& spec : specs)
    for (const Shape& s : shapes) cases.push_back({spec, s});
  return cases;
}

}  // namespace flashjit::gpu_test
