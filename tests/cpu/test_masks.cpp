// Block-sparse and pattern masks and variable-length batches without a GPU: the layout helper,
// tiles fitted to mask blocks, kernel names and constants, the checks and packing of the new
// forward arguments, the fp64 reference's dense masks and varlen, and NVRTC compiles of the
// varlen kernel variants.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "autotune/candidates.h"
#include "flashjit/flashjit.h"
#include "generator/emit.h"
#include "generator/fwd_sm80_path.h"
#include "generator/fwd_sm90_path.h"
#include "generator/plan.h"
#include "runtime/disk_cache.h"
#include "runtime/forward_params.h"
#include "runtime/kernel_compiler.h"
#include "verify/reference.h"

namespace flashjit {
namespace {

Spec spec_from(const std::string& yaml) { return Spec::from_yaml(yaml, "test.yaml"); }

Spec sparse_spec(int block_q, int block_k, int head_dim = 64) {
  return spec_from("head_dim: " + std::to_string(head_dim) + "\nmask: {block_sparse: {block_q: " +
                   std::to_string(block_q) + ", block_k: " + std::to_string(block_k) + "}}\n");
}

template <class Fn>
std::string error_of(Fn fn, ErrorKind kind) {
  try {
    fn();
  } catch (const Error& e) {
    CHECK(e.kind() == kind);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("block layout: counts and ascending indices from a dense block matrix") {
  // [batch 2, heads 1, q_blocks 3, k_blocks 4]
  const std::vector<uint8_t> dense = {1, 0, 1, 0,  0, 0, 0, 0,  1, 1, 1, 1,
                                      0, 0, 0, 1,  1, 0, 0, 0,  0, 1, 0, 0};
  const BlockLayout layout = block_layout_from_dense(dense, 2, 1, 3, 4);
  CHECK(layout.batch == 2);
  CHECK(layout.heads == 1);
  CHECK(layout.q_blocks == 3);
  CHECK(layout.max_blocks == 4);
  CHECK(layout.counts == std::vector<int32_t>{2, 0, 4, 1, 1, 1});
  CHECK(layout.indices == std::vector<int32_t>{0, 2, 0, 0,  0, 0, 0, 0,  0, 1, 2, 3,
                                               3, 0, 0, 0,  0, 0, 0, 0,  1, 0, 0, 0});
  // Nothing visible: counts 0, and still one (unused) index per row.
  const BlockLayout empty = block_layout_from_dense(std::vector<uint8_t>(6, 0), 1, 2, 3, 1);
  CHECK(empty.max_blocks == 1);
  CHECK(empty.counts == std::vector<int32_t>(6, 0));
  CHECK(empty.indices.size() == 6);

  CHECK(error_of([] { block_layout_from_dense(std::vector<uint8_t>(5), 1, 1, 2, 3); },
                 ErrorKind::Shape)
            .find("the dense matrix holds 5 entries, [1, 1, 2, 3] needs 6") != std::string::npos);
  CHECK(error_of([] { block_layout_from_dense({}, 1, 0, 1, 1); }, ErrorKind::Shape)
            .find("heads 0") != std::string::npos);
}

TEST_CASE("tiles: the heuristic fits its tiles into mask blocks; given ones must fit") {
  for (const char* target : {"sm_80", "sm_86", "sm_90a"})
    for (int block_q : {16, 32, 48, 64, 128, 256, 1024})
      for (int block_k : {16, 48, 64, 96, 128, 512})
        for (int d : {64, 128, 256}) {
          CAPTURE(target);
          CAPTURE(block_q);
          CAPTURE(block_k);
          CAPTURE(d);
          const Spec spec = sparse_spec(block_q, block_k, d);
          const Tiles t = gen::default_tiles(spec, target);
          CHECK(block_q % t.block_m == 0);
          CHECK(block_k % t.block_n == 0);
          const gen::Plan plan = gen::make_plan(spec, target);
          CHECK(plan.tiles == t);
          // The sm90 kernel's warps are its three warp groups; the sm80 kernel's own rows.
          if (plan.path->id == gen::KernelPath::FwdSm80) CHECK(t.block_m % (16 * t.warps) == 0);
        }
  // Tiles already inside the blocks stay as they are: a masked kernel's are the causal
  // kernel's (the unmasked one's key block is wider at d64).
  const Spec big = sparse_spec(1024, 512, 64);
  const Spec dense = spec_from("head_dim: 64\ncausal: true\n");
  for (const char* target : {"sm_80", "sm_90a"}) {
    CAPTURE(target);
    CHECK(gen::default_tiles(big, target) == gen::default_tiles(dense, target));
  }
  CHECK(gen::fit_tiles_to_mask(sparse_spec(48, 96), Tiles{128, 64, 4, 3}) == Tiles{48, 48, 1, 3});
  CHECK(gen::fit_tiles_to_mask(spec_from("head_dim: 64\n"), Tiles{128, 64, 4, 3}) ==
        Tiles{128, 64, 4, 3});
  // Tuned tiles that straddle mask blocks are refused by the plan, naming the rule.
  const Tiles straddling{128, 64, 4, 2};
  CHECK(error_of([&] { gen::make_plan(sparse_spec(64, 64), "sm_80", {}, &straddling); },
                 ErrorKind::Usage)
            .find("block_m 128 does not divide the mask's block_q 64") != std::string::npos);
  CHECK(gen::mask_tiles_problem(sparse_spec(128, 96), Tiles{128, 64, 4, 2}) ==
        "block_n 64 does not divide the mask's block_k 96");
  // The same rule for the sm90 kernel's tiles, given or tuned.
  const Tiles ws_straddling{128, 64, 12, 2};
  CHECK(error_of([&] { gen::make_plan(sparse_spec(128, 96), "sm_90a", {}, &ws_straddling); },
                 ErrorKind::Usage)
            .find("with the sm90 kernel on sm_90a: block_n 64 does not divide the mask's "
                  "block_k 96") != std::string::npos);
  CHECK(gen::tiles_problem(sparse_spec(256, 128), "sm_90a", Tiles{128, 96, 12, 2}) ==
        "block_n 96 does not divide the mask's block_k 128");
  CHECK(gen::tiles_problem(sparse_spec(256, 128), "sm_90a", Tiles{128, 64, 12, 2}) == "");
}

TEST_CASE("plan: the sm90 kernel serves block masks whose query blocks hold whole CTAs") {
  using gen::KernelPath;
  const auto path = [](const Spec& spec) { return gen::make_plan(spec, "sm_90a").path->id; };
  const auto pattern = [](int block, const std::string& rest) {
    return spec_from("head_dim: 96\nmask: {pattern: {block: " + std::to_string(block) + ", " +
                     rest + "}}\n");
  };
  // block_q a multiple of the sm90 kernel's 128 rows; any key block (a multiple of 16).
  const std::pair<int, int> fitting[] = {{128, 128}, {256, 64}, {128, 16}, {384, 48}, {1024, 512}};
  for (const auto& [block_q, block_k] : fitting) {
    CAPTURE(block_q);
    CAPTURE(block_k);
    CHECK(path(sparse_spec(block_q, block_k)) == KernelPath::FwdSm90);
  }
  CHECK(path(pattern(128, "kind: local, blocks: 2")) == KernelPath::FwdSm90);
  CHECK(path(pattern(256, "kind: strided, stride: 3")) == KernelPath::FwdSm90);
  CHECK(path(pattern(128, "kind: global_local, global_blocks: 1, window_blocks: 1")) ==
        KernelPath::FwdSm90);
  // Query blocks that a 128-row CTA would straddle: the sm80 kernel, with tiles that fit.
  for (const Spec& spec :
       {sparse_spec(64, 128), sparse_spec(192, 64), pattern(64, "kind: local, blocks: 1")}) {
    const gen::Plan plan = gen::make_plan(spec, "sm_90a");
    CHECK(plan.path->id == KernelPath::FwdSm80);
    CHECK(gen::mask_tiles_problem(spec, plan.tiles) == "");
  }
  CHECK(gen::make_plan(sparse_spec(128, 128), "sm_80").path->id == KernelPath::FwdSm80);
  // Calls TMA cannot load (varlen ones whose row counts are not given among them) fall back
  // to the sm80 kernel, its tiles fitted to the mask; varlen calls it can load keep the sm90
  // kernel.
  const Spec sparse = sparse_spec(256, 48);
  for (const gen::Plan& plan :
       {gen::make_plan(sparse, "sm_90a", {.align_bytes = 8, .tma_loadable = false}),
        gen::make_plan(sparse, "sm_90a", {.tma_loadable = false, .varlen = true})}) {
    CHECK(plan.path->id == KernelPath::FwdSm80);
    CHECK(gen::mask_tiles_problem(sparse, plan.tiles) == "");
  }
  const gen::Plan varlen = gen::make_plan(sparse, "sm_90a", {.varlen = true});
  CHECK(varlen.path->id == KernelPath::FwdSm90);
  CHECK(varlen.call.varlen);
}

TEST_CASE("tiles: the sm90 heuristic picks a block_n that divides the mask's key block") {
  for (int d : {32, 64, 96, 128, 192, 256, 512})
    for (int block_k : {16, 32, 48, 64, 80, 96, 112, 128, 160, 256, 384, 4096}) {
      CAPTURE(d);
      CAPTURE(block_k);
      const Spec spec = sparse_spec(128, block_k, d);
      const gen::Plan plan = gen::make_plan(spec, "sm_90a");
      REQUIRE(plan.path->id == gen::KernelPath::FwdSm90);
      CHECK(block_k % plan.tiles.block_n == 0);
      CHECK(gen::sm90_tiles_problem(gen::padded_dims(spec), plan.tiles, "sm_90a") == "");
      // The causal kernel's choice whenever it divides block_k.
      const Tiles dense = gen::sm90_default_tiles(
          spec_from("head_dim: " + std::to_string(d) + "\ncausal: true\n"), "sm_90a");
      if (block_k % dense.block_n == 0) CHECK(plan.tiles == dense);
    }
}

TEST_CASE("autotune: block_sparse specs are refused; pattern candidates fit the blocks") {
  CHECK(error_of([] { tune::candidate_space(sparse_spec(128, 128), "sm_90a"); }, ErrorKind::Usage)
            .find("a block_sparse kernel's speed depends on the run-time layout") !=
        std::string::npos);
  const tune::CandidateSpace space = tune::candidate_space(
      spec_from("head_dim: 64\nmask: {pattern: {kind: local, block: 64, blocks: 2}}\n"), "sm_90a");
  REQUIRE_FALSE(space.candidates.empty());
  for (const Tiles& t : space.candidates) {
    CHECK(64 % t.block_m == 0);
    CHECK(64 % t.block_n == 0);
  }
  CHECK(std::any_of(space.pruned.begin(), space.pruned.end(), [](const auto& p) {
    return p.reason.find("does not divide the mask's block") != std::string::npos;
  }));
}

TEST_CASE("plan and emit: kernel names and constants of block masks and varlen") {
  CHECK(gen::make_plan(sparse_spec(128, 128), "sm_90a").kernel_name ==
        "fa_fwd_qk64_v64_bf16_full_bsparse128x128_ws_n128s3_a16_sm90a");
  const gen::Plan sparse = gen::make_plan(sparse_spec(128, 128), "sm_80");
  CHECK(sparse.kernel_name == "fa_fwd_qk64_v64_bf16_full_bsparse128x128_m128n64w4s3_a16_sm80");
  CHECK_FALSE(sparse.call.varlen);
  const std::string src = gen::emit_source(sparse);
  CHECK(src.find("static constexpr bool kBlockSparse = true;") != std::string::npos);
  CHECK(src.find("static constexpr fj::Pattern kPattern = fj::Pattern::kNone;") !=
        std::string::npos);
  CHECK(src.find("static constexpr int kMaskBlockQ = 128;") != std::string::npos);
  CHECK(src.find("static constexpr bool kVarlen = false;") != std::string::npos);

  const gen::Plan varlen = gen::make_plan(sparse.spec, "sm_80", {.varlen = true});
  CHECK(varlen.call.varlen);
  CHECK(varlen.kernel_name == sparse.kernel_name + "_varlen");
  CHECK(gen::emit_source(varlen).find("static constexpr bool kVarlen = true;") !=
        std::string::npos);

  const Spec global = spec_from(
      "head_dim: 128\ncausal: true\n"
      "mask: {pattern: {kind: global_local, block: 64, global_blocks: 2, window_blocks: 3}}\n");
  const gen::Plan pattern = gen::make_plan(global, "sm_80");
  CHECK(pattern.kernel_name.find("fa_fwd_qk128_v128_bf16_causal_global2local3b64_m64") == 0);
  const std::string psrc = gen::emit_source(pattern);
  CHECK(psrc.find("kPattern = fj::Pattern::kGlobalLocal;") != std::string::npos);
  CHECK(psrc.find("kPatternGlobal = 2;") != std::string::npos);
  CHECK(psrc.find("kPatternWindow = 3;") != std::string::npos);
  CHECK(psrc.find("kBlockSparse = false;") != std::string::npos);
  CHECK(gen::make_plan(spec_from("head_dim: 64\nmask: {pattern: {kind: strided, block: 64, "
                                 "stride: 3}}\n"), "sm_80")
            .kernel_name.find("_full_strided3b64_") != std::string::npos);
  CHECK(gen::make_plan(spec_from("head_dim: 64\nmask: {pattern: {kind: local, block: 32, "
                                 "blocks: 1}}\n"), "sm_80")
            .kernel_name.find("_full_local1b32_") != std::string::npos);
}

TEST_CASE("forward arguments: the block-sparse layout and cu_seqlens") {
  const Spec spec = sparse_spec(128, 64);
  alignas(16) static char storage[16];
  alignas(16) static int32_t ints[8];
  ForwardArgs args = ForwardArgs::contiguous(spec, 2, 4, 2, 300, 257);
  args.q = args.k = args.v = storage;
  args.o = storage;
  const auto error = [&](const ForwardArgs& a) {
    return error_of([&] { rt::check_forward_args(spec, a); }, ErrorKind::Shape);
  };
  CHECK(error(args).find("block_sparse mask: block_counts and block_indices must be non-null") !=
        std::string::npos);
  args.block_counts = ints;
  args.block_indices = ints + 4;
  args.layout_batch = 2;
  args.layout_heads = 1;
  args.layout_q_blocks = 3;
  args.layout_max_blocks = 5;
  CHECK_NOTHROW(rt::check_forward_args(spec, args));

  ForwardArgs bad = args;
  bad.layout_batch = 3;
  CHECK(error(bad).find("layout_batch = 3 must be 1 or batch = 2") != std::string::npos);
  bad = args;
  bad.layout_heads = 2;
  CHECK(error(bad).find("layout_heads = 2 must be 1 or heads_q = 4") != std::string::npos);
  bad = args;
  bad.layout_q_blocks = 2;
  CHECK(error(bad).find("layout_q_blocks = 2 must be >= ceil(seqlen_q 300 / block_q 128) = 3") !=
        std::string::npos);
  bad = args;
  bad.layout_max_blocks = 0;
  CHECK(error(bad).find("layout_max_blocks = 0 must be >= 1") != std::string::npos);
  bad = args;
  bad.block_indices = reinterpret_cast<const int32_t*>(storage + 2);
  CHECK(error(bad).find("must be 4-byte aligned (int32)") != std::string::npos);
  bad = args;
  bad.cu_seqlens_q = ints;
  CHECK(error(bad).find("give both or neither") != std::string::npos);

  // A layout given to a kernel without a block_sparse mask is a mistake, not ignored.
  const Spec plain = spec_from("name: plain\nhead_dim: 64\n");
  CHECK(error_of([&] { rt::check_forward_args(plain, args); }, ErrorKind::Shape)
            .find("block_counts/block_indices are given but kernel plain has mask none") !=
        std::string::npos);

  // Varlen: packed tensors have no batch stride to check.
  ForwardArgs packed = ForwardArgs::varlen(plain, 3, 4, 2, 300, 257);
  CHECK(packed.q_stride.batch == 0);
  CHECK(packed.q_stride.seq == 4 * 64);
  packed.q = packed.k = packed.v = storage;
  packed.o = storage;
  packed.cu_seqlens_q = ints;
  packed.cu_seqlens_k = ints + 4;
  CHECK_NOTHROW(rt::check_forward_args(plain, packed));
  packed.total_q = 700;
  packed.total_k = 650;
  CHECK_NOTHROW(rt::check_forward_args(plain, packed));
  bad = packed;
  bad.total_k = -1;
  CHECK(error_of([&] { rt::check_forward_args(plain, bad); }, ErrorKind::Shape)
            .find("total_q = 700 and total_k = -1 must be >= 0") != std::string::npos);
  bad = ForwardArgs::contiguous(plain, 3, 4, 2, 300, 257);
  bad.q = bad.k = bad.v = storage;
  bad.o = storage;
  bad.total_q = 900;
  CHECK(error_of([&] { rt::check_forward_args(plain, bad); }, ErrorKind::Shape)
            .find("are for varlen calls (cu_seqlens): leave them 0") != std::string::npos);

  // Packing: a broadcast dimension gets stride 0, in entries of block_counts.
  FwdParams params{};
  rt::fill_mask_params(params, args);  // layout [2, 1, 3]
  CHECK(params.block_sparse.batch_stride == 3);
  CHECK(params.block_sparse.head_stride == 0);
  CHECK(params.block_sparse.max_blocks == 5);
  CHECK(params.block_sparse.counts == ints);
  ForwardArgs per_head = args;
  per_head.layout_batch = 1;
  per_head.layout_heads = 4;
  rt::fill_mask_params(params, per_head);
  CHECK(params.block_sparse.batch_stride == 0);
  CHECK(params.block_sparse.head_stride == 3);
  rt::fill_mask_params(params, packed);
  CHECK(params.cu_seqlens_q == ints);
  CHECK(params.cu_seqlens_k == ints + 4);
  CHECK(params.block_sparse.counts == nullptr);
}

namespace {

// Random inputs for the reference tests.
std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> normal;
  std::vector<float> out(n);
  for (float& x : out) x = normal(engine);
  return out;
}

TensorStrides packed_strides(int seqlen, int heads, int dim) {
  return {int64_t{seqlen} * heads * dim, int64_t{heads} * dim, dim};
}

// The reference written the slow way, one (b, h, i) at a time with an explicit predicate.
struct Direct {
  std::vector<double> o, lse;
};
template <class Visible>
Direct direct(const verify::AttentionProblem& p, const std::vector<float>& q,
              const std::vector<float>& k, const std::vector<float>& v, Visible visible) {
  Direct out;
  out.o.assign(static_cast<size_t>(p.batch) * p.seqlen_q * p.heads_q * p.head_dim_v, 0.0);
  out.lse.assign(static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q, 0.0);
  const int group = p.heads_q / p.heads_kv;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; i < p.seqlen_q; ++i) {
        std::vector<double> w(p.seqlen_k, 0.0);
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < p.seqlen_k; ++j) {
          if (!visible(b, h, i, j)) continue;
          double dot = 0;
          for (int d = 0; d < p.head_dim_qk; ++d)
            dot += double(q[((size_t(b) * p.seqlen_q + i) * p.heads_q + h) * p.head_dim_qk + d]) *
                   k[((size_t(b) * p.seqlen_k + j) * p.heads_kv + h / group) * p.head_dim_qk + d];
          w[j] = dot * p.scale();
          mx = std::max(mx, w[j]);
        }
        double sum = 0;
        for (int j = 0; j < p.seqlen_k; ++j) {
          w[j] = visible(b, h, i, j) ? std::exp(w[j] - mx) : 0.0;
          sum += w[j];
        }
        out.lse[(size_t(b) * p.heads_q + h) * p.seqlen_q + i] =
            sum > 0 ? mx + std::log(sum) : -std::numeric_limits<double>::infinity();
        for (int c = 0; c < p.head_dim_v; ++c) {
          double acc = 0;
          for (int j = 0; j < p.seqlen_k; ++j)
            acc += w[j] * v[((size_t(b) * p.seqlen_k + j) * p.heads_kv + h / group) * p.head_dim_v + c];
          out.o[((size_t(b) * p.seqlen_q + i) * p.heads_q + h) * p.head_dim_v + c] =
              sum > 0 ? acc / sum : 0.0;
        }
      }
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t e = 0; e < got.size(); ++e) {
    CAPTURE(e);
    if (std::isinf(want[e])) {
      CHECK(got[e] == want[e]);
    } else {
      CHECK(got[e] == doctest::Approx(want[e]).epsilon(1e-9).scale(1.0));
    }
  }
}

}  // namespace

TEST_CASE("reference: a block mask, per batch and head and broadcast, with causal on top") {
  verify::AttentionProblem p;
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.seqlen_q = 37;
  p.seqlen_k = 45;
  p.head_dim_qk = 5;
  p.head_dim_v = 3;
  p.block_q = 16;
  p.block_k = 8;
  p.q_blocks = 3;
  p.k_blocks = 6;
  const auto q = random_values(size_t(p.batch) * p.seqlen_q * p.heads_q * p.head_dim_qk, 1);
  const auto k = random_values(size_t(p.batch) * p.seqlen_k * p.heads_kv * p.head_dim_qk, 2);
  const auto v = random_values(size_t(p.batch) * p.seqlen_k * p.heads_kv * p.head_dim_v, 3);
  for (const auto [layout_batch, layout_heads] : {std::pair{2, 4}, std::pair{1, 4},
                                                   std::pair{2, 1}, std::pair{1, 1}})
    for (const bool causal : {false, true}) {
      CAPTURE(layout_batch);
      CAPTURE(layout_heads);
      CAPTURE(causal);
      p.causal = causal;
      p.block_batch = layout_batch;
      p.block_heads = layout_heads;
      std::mt19937_64 engine(layout_batch * 10 + layout_heads);
      p.block_visible.resize(size_t(layout_batch) * layout_heads * p.q_blocks * p.k_blocks);
      for (auto& x : p.block_visible) x = engine() % 3 == 0;
      // Query block 1 of the first (batch, head) sees nothing.
      std::fill_n(p.block_visible.begin() + p.k_blocks, p.k_blocks, 0);
      const verify::ReferenceOutput got = verify::reference_forward(
          p, {q.data(), packed_strides(p.seqlen_q, p.heads_q, p.head_dim_qk)},
          {k.data(), packed_strides(p.seqlen_k, p.heads_kv, p.head_dim_qk)},
          {v.data(), packed_strides(p.seqlen_k, p.heads_kv, p.head_dim_v)}, 3);
      const Direct want = direct(p, q, k, v, [&](int b, int h, int i, int j) {
        const int lb = layout_batch > 1 ? b : 0, lh = layout_heads > 1 ? h : 0;
        const bool block = p.block_visible[((size_t(lb) * layout_heads + lh) * p.q_blocks +
                                            i / 16) * p.k_blocks + j / 8] != 0;
        return block && (!causal || j <= i + p.seqlen_k - p.seqlen_q);
      });
      check_close(got.o, want.o);
      check_close(got.lse, want.lse);
      CHECK(got.lse[16] == -std::numeric_limits<double>::infinity());  // row 16: query block 1
      double pairs = 0;
      for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.heads_q; ++h)
          for (int i = 0; i < p.seqlen_q; ++i)
            for (int j = 0; j < p.seqlen_k; ++j) {
              const int lb = layout_batch > 1 ? b : 0, lh = layout_heads > 1 ? h : 0;
              pairs += p.block_visible_at(lb, lh, i, j) &&
                       (!causal || j <= i + p.seqlen_k - p.seqlen_q);
            }
      CHECK(p.visible_pairs() == pairs);
    }
}

TEST_CASE("reference: pattern block matrices follow configs/README.md's definitions") {
  Spec local = spec_from("head_dim: 8\nmask: {pattern: {kind: local, block: 16, blocks: 1}}\n");
  CHECK(verify::pattern_block_matrix(local, 3, 4) ==
        std::vector<uint8_t>{1, 1, 0, 0,  1, 1, 1, 0,  0, 1, 1, 1});
  Spec strided = spec_from("head_dim: 8\nmask: {pattern: {kind: strided, block: 16, stride: 2}}\n");
  CHECK(verify::pattern_block_matrix(strided, 3, 4) ==
        std::vector<uint8_t>{1, 0, 1, 0,  0, 1, 0, 1,  1, 0, 1, 0});
  Spec global = spec_from("head_dim: 8\nmask: {pattern: {kind: global_local, block: 16, "
                          "global_blocks: 1, window_blocks: 0}}\n");
  CHECK(verify::pattern_block_matrix(global, 4, 5) ==
        std::vector<uint8_t>{1, 1, 1, 1, 1,  1, 1, 0, 0, 0,  1, 0, 1, 0, 0,  1, 0, 0, 1, 0});
}

TEST_CASE("reference: a varlen batch equals each sequence run on its own") {
  verify::AttentionProblem p;
  p.heads_q = 2;
  p.heads_kv = 1;
  p.head_dim_qk = 4;
  p.head_dim_v = 6;
  p.causal = true;
  p.cu_seqlens_q = {0, 5, 5, 6, 19};  // lengths 5, 0, 1, 13
  p.cu_seqlens_k = {0, 7, 10, 10, 23};  // lengths 7, 3, 0, 13
  p.batch = 4;
  p.block_q = p.block_k = 4;
  p.block_batch = 4;
  p.q_blocks = 4;
  p.k_blocks = 4;
  std::mt19937_64 engine(5);
  p.block_visible.resize(4 * 4 * 4);
  for (auto& x : p.block_visible) x = engine() % 2;
  const auto q = random_values(19 * 2 * 4, 6), k = random_values(23 * 4, 7),
             v = random_values(23 * 6, 8);
  const verify::ReferenceOutput got = verify::reference_forward(
      p, {q.data(), packed_strides(19, 2, 4)}, {k.data(), packed_strides(23, 1, 4)},
      {v.data(), packed_strides(23, 1, 6)});
  REQUIRE(got.o.size() == 19 * 2 * 6);
  REQUIRE(got.lse.size() == 2 * 19);  // [heads_q, total_q]
  double pairs = 0;
  for (int s = 0; s < 4; ++s) {
    CAPTURE(s);
    verify::AttentionProblem one = p;
    one.batch = 1;
    one.cu_seqlens_q.clear();
    one.cu_seqlens_k.clear();
    one.seqlen_q = p.cu_seqlens_q[s + 1] - p.cu_seqlens_q[s];
    one.seqlen_k = p.cu_seqlens_k[s + 1] - p.cu_seqlens_k[s];
    one.block_batch = 1;
    one.block_visible.assign(p.block_visible.begin() + s * 16, p.block_visible.begin() + s * 16 + 16);
    pairs += one.visible_pairs();
    if (one.seqlen_q == 0) continue;
    const int q0 = p.cu_seqlens_q[s], k0 = p.cu_seqlens_k[s];
    const std::vector<float> qs(q.begin() + q0 * 8, q.begin() + (q0 + one.seqlen_q) * 8);
    const std::vector<float> ks(k.begin() + k0 * 4, k.begin() + (k0 + one.seqlen_k) * 4);
    const std::vector<float> vs(v.begin() + k0 * 6, v.begin() + (k0 + one.seqlen_k) * 6);
    const Direct want = direct(one, qs, ks, vs, [&](int, int, int i, int j) {
      return one.block_visible_at(0, 0, i, j) && j <= i + one.seqlen_k - one.seqlen_q;
    });
    check_close(std::vector<double>(got.o.begin() + q0 * 12, got.o.begin() + (q0 + one.seqlen_q) * 12),
                want.o);
    for (int h = 0; h < 2; ++h)
      check_close(std::vector<double>(got.lse.begin() + h * 19 + q0,
                                      got.lse.begin() + h * 19 + q0 + one.seqlen_q),
                  std::vector<double>(want.lse.begin() + h * one.seqlen_q,
                                      want.lse.begin() + (h + 1) * one.seqlen_q));
  }
  // Sequence 2 has one query and no key: O = 0, LSE = -inf.
  CHECK(got.lse[5] == -std::numeric_limits<double>::infinity());
  CHECK(got.o[5 * 12] == 0.0);
  CHECK(p.visible_pairs() == pairs);  // both count every head
}

TEST_CASE("compile: the varlen variant of every masked config builds with no spills") {
  rt::KernelCompiler compiler(rt::DiskCache("", false));
  for (const auto& item : std::filesystem::directory_iterator(FLASHJIT_SOURCE_DIR "/configs")) {
    if (item.path().extension() != ".yaml") continue;
    const Spec spec = Spec::from_file(item.path().string());
    if (spec.mask == MaskKind::None && spec.head_dim_qk != 64 && spec.head_dim_qk != 128)
      continue;  // unmasked varlen: the common head dims suffice
    for (const char* target : {"sm_80", "sm_90a"}) {
      CAPTURE(spec.name);
      CAPTURE(target);
      const gen::Plan plan = gen::make_plan(spec, target, {.varlen = true});
      const auto compiled = compiler.compile(plan);
      CHECK(compiled->report.kernel_name == plan.kernel_name);
      CHECK(compiled->report.spill_store_bytes == 0);
      CHECK(compiled->report.spill_load_bytes == 0);
      CHECK(compiled->report.stack_bytes == 0);
    }
  }
}

// The shipped mask configs reach the sm90 kernel only where their blocks fit it (see
// test_compile.cpp for those): these cover every block mask on it, with key blocks of one and
// of several tiles, causal, qk != v and the widest V slice. A kernel whose wgmma ptxas had to
// serialise or fence (C75xx) fails to compile (nvrtc_compiler.cpp).
TEST_CASE("compile: the sm90 kernel's block masks build with no spills") {
  const char* specs[] = {
      "head_dim: 64\nmask: {block_sparse: {block_q: 128, block_k: 128}}\n",
      "head_dim: 128\ncausal: true\nmask: {block_sparse: {block_q: 256, block_k: 64}}\n",
      "head_dim_qk: 192\nhead_dim_v: 128\ndtype: fp16\ncausal: true\n"
      "mask: {block_sparse: {block_q: 128, block_k: 256}}\n",
      "head_dim: 256\nmask: {block_sparse: {block_q: 128, block_k: 128}}\n",
      "head_dim: 64\ncausal: true\nmask: {pattern: {kind: local, block: 128, blocks: 2}}\n",
      "head_dim: 96\ndtype: fp16\nmask: {pattern: {kind: strided, block: 256, stride: 3}}\n",
      "head_dim: 128\nmask: {pattern: {kind: global_local, block: 128, global_blocks: 2, "
      "window_blocks: 1}}\n",
  };
  rt::KernelCompiler compiler(rt::DiskCache("", false));
  for (const char* yaml : specs) {
    CAPTURE(yaml);
    const gen::Plan plan = gen::make_plan(spec_from(yaml), "sm_90a");
    REQUIRE(plan.path->id == gen::KernelPath::FwdSm90);
    const auto compiled = compiler.compile(plan);
    CHECK(compiled->report.spill_store_bytes == 0);
    CHECK(compiled->report.spill_load_bytes == 0);
    CHECK(compiled->report.stack_bytes == 0);
  }
}

}  // namespace flashjit
