// Decode's host side: which calls take it, its tiles and plans, the split heuristic, the
// scratch sizes, the grid, the cache arguments' checks, and kernels that compile without
// spills (NVRTC, no GPU).
#include <doctest/doctest.h>

#include <string>
#include <utility>

#include "generator/dec_sm80_path.h"
#include "generator/plan.h"
#include "generator/targets.h"
#include "runtime/call_traits.h"
#include "runtime/decode_params.h"
#include "runtime/decode_splits.h"
#include "runtime/forward_params.h"
#include "runtime/merge_params.h"
#include "runtime/operation.h"
#include "tests/cpu/runtime_test_support.h"

namespace flashjit::rt {
namespace {

using test::spec_of;

// Pointers the checks accept (never dereferenced on the host).
ForwardArgs decode_args(const Spec& spec, int batch, int heads_q, int heads_kv, int seqlen_q,
                        int seqlen_k) {
  ForwardArgs args = ForwardArgs::contiguous(spec, batch, heads_q, heads_kv, seqlen_q, seqlen_k);
  alignas(256) static char memory[256];
  args.q = args.k = args.v = memory;
  args.o = memory;
  return args;
}

std::string error_of(const Spec& spec, const ForwardArgs& args) {
  try {
    check_forward_args(spec, args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

OperationPlan decode_plan(const Spec& spec, const std::string& target, const ForwardArgs& args) {
  return plan_decode(spec, target, decode_call_traits(spec, args),
                     gen::dec_sm80_tiles(spec, target, decode_packed_rows(args)));
}

}  // namespace

TEST_CASE("decode: auto takes few packed rows against many keys, and every KV-cache call") {
  const Spec spec = spec_of(128, 128);
  std::string why;
  CHECK(takes_decode(spec, decode_args(spec, 1, 32, 8, 1, 32768), &why));
  CHECK(why.find("4 packed query rows") != std::string::npos);
  CHECK(takes_decode(spec, decode_args(spec, 16, 32, 8, 16, 16384), &why));   // 64 rows
  CHECK_FALSE(takes_decode(spec, decode_args(spec, 16, 32, 8, 17, 16384), &why));  // 68
  CHECK_FALSE(takes_decode(spec, decode_args(spec, 1, 8, 8, 1, 255), &why));  // few keys
  ForwardArgs cached = decode_args(spec, 2, 8, 8, 100, 100);
  static const int32_t lengths[2] = {100, 3};
  cached.cache_seqlens = lengths;
  CHECK(takes_decode(spec, cached, &why));
  CHECK(why == "the call has a KV cache");

  Spec never = spec;
  never.decode = DecodeMode::Never;
  CHECK_FALSE(takes_decode(never, decode_args(spec, 1, 32, 8, 1, 32768), &why));
  Spec always = spec;
  always.decode = DecodeMode::Always;
  CHECK(takes_decode(always, decode_args(spec, 1, 8, 8, 1000, 1000), &why));
  // Block masks and varlen batches run the forward whatever the spec says.
  Spec sparse = always;
  sparse.mask = MaskKind::BlockSparse;
  sparse.block_q = sparse.block_k = 128;
  CHECK_FALSE(takes_decode(sparse, decode_args(sparse, 1, 8, 8, 1, 4096), &why));
}

TEST_CASE("decode: tiles hold the packed rows in 8 rows or m16 tiles and fit every target") {
  const Spec spec = spec_of(128, 128);
  // Up to 8 packed rows take the 8-row tile (the products transposed), more m16 tiles.
  CHECK(gen::dec_sm80_tiles(spec, "sm_90a", 1) == Tiles{8, 64, 4, 3});
  CHECK(gen::dec_sm80_tiles(spec, "sm_90a", 9) == Tiles{16, 64, 4, 3});
  // Heads of 17 to 64 columns read 128 keys a step with eight warps; 16 and under keep 64.
  CHECK(gen::dec_sm80_tiles(spec_of(64, 64), "sm_90a", 8) == Tiles{8, 128, 8, 2});
  CHECK(gen::dec_sm80_tiles(spec_of(64, 64), "sm_90a", 16) == Tiles{16, 128, 8, 2});
  CHECK(gen::dec_sm80_tiles(spec_of(40, 64), "sm_80", 4) == Tiles{8, 128, 8, 2});
  CHECK(gen::dec_sm80_tiles(spec_of(16, 16), "sm_90a", 8) == Tiles{8, 64, 4, 3});
  CHECK(gen::dec_sm80_tiles(spec_of(64, 128), "sm_90a", 8) == Tiles{8, 64, 4, 3});
  CHECK(gen::dec_sm80_tiles(spec, "sm_90a", 17).block_m == 32);
  // 48 and 64 rows of d128 would hold more accumulators than the budget: 32 rows a block.
  CHECK(gen::dec_sm80_tiles(spec, "sm_90a", 64).block_m == 32);
  // 64 rows of d64 (176 accumulators) spilled on sm_80, sm_86 and sm_90a: 48 rows a block.
  CHECK(gen::dec_sm80_tiles(spec_of(64, 64), "sm_90a", 64).block_m == 48);
  CHECK(gen::dec_sm80_tiles(spec_of(64, 64), "sm_90a", 48).block_m == 48);
  // A mask's registers count against the budget: 48 rows of d80 causal and 32 of d128 with
  // a window spilled on sm_90a, and take the next block down; 32 rows of d128 causal fit.
  Spec causal80 = spec_of(80, 80);
  causal80.causal = true;
  CHECK(gen::dec_sm80_tiles(spec_of(80, 80), "sm_90a", 48).block_m == 48);
  CHECK(gen::dec_sm80_tiles(causal80, "sm_90a", 48).block_m == 32);
  Spec causal128 = spec;
  causal128.causal = true;
  CHECK(gen::dec_sm80_tiles(causal128, "sm_90a", 64).block_m == 32);
  Spec window128 = spec;
  window128.mask = MaskKind::SlidingWindow;
  window128.window_left = 253;
  window128.window_right = 61;
  CHECK(gen::dec_sm80_tiles(window128, "sm_90a", 32).block_m == 16);
  // Every head dim gets a tiling with and without a mask (16 rows at V slices of 256 hold 140
  // accumulators: room for a window's 16 registers).
  for (const char* target : {"sm_80", "sm_86", "sm_89", "sm_90a"})
    for (int d = 1; d <= 512; ++d)
      for (int mask = 0; mask < 3; ++mask)
        for (int rows : {1, 8, 16, 40, 64}) {
          Spec s = spec_of(d, d);
          s.causal = mask == 1;
          if (mask == 2) {
            s.mask = MaskKind::SlidingWindow;
            s.window_left = 253;
            s.window_right = 61;
          }
          INFO(target, " d ", d, " mask ", mask, " rows ", rows);
          const Tiles t = gen::dec_sm80_tiles(s, target, rows);
          CHECK(gen::dec_sm80_tiles_problem(gen::padded_dims(s), t, target).empty());
        }
  CHECK(gen::dec_sm80_tiles_problem(gen::padded_dims(spec), {16, 48, 4, 2}, "sm_90a")
            .find("multiple of 16 * warps") != std::string::npos);
  CHECK(gen::dec_sm80_tiles_problem(gen::padded_dims(spec), {80, 64, 4, 2}, "sm_90a")
            .find("block_m 80") != std::string::npos);
  CHECK(gen::dec_sm80_tiles_problem(gen::padded_dims(spec), {24, 64, 4, 2}, "sm_90a")
            .find("must be 8, 16, 32, 48 or 64") != std::string::npos);
}

TEST_CASE("decode: the plan is the split kernel then the combine, paged caches a variant") {
  const Spec spec = spec_of(128, 128);
  ForwardArgs args = decode_args(spec, 1, 32, 8, 1, 32768);
  const OperationPlan dense = decode_plan(spec, "sm_90a", args);
  REQUIRE(dense.launches.size() == 2);
  CHECK(dense.operation == gen::Operation::Decode);
  CHECK(dense.launches[0].path->step == gen::Step::DecSplit);
  CHECK(dense.launches[1].path->step == gen::Step::DecCombine);
  CHECK(dense.launches[0].kernel_name == "fa_dec_qk128_v128_bf16_full_m8n64w4s3_a16_sm90a");
  CHECK(dense.launches[1].kernel_name == "fa_dec_combine_qk128_v128_bf16_full_w4_a16_sm90a");
  static const int32_t table[1] = {0};
  args.block_table = table;
  args.page_size = 32768;
  args.max_pages = 1;
  args.num_pages = 1;
  const OperationPlan paged = decode_plan(spec, "sm_90a", args);
  CHECK(paged.launches[0].kernel_name == dense.launches[0].kernel_name + "_paged");
  // The combine waits for the split kernel on the device only where griddepcontrol exists:
  // there alone the runtime launches it before the split kernel ends.
  CHECK(gen::has_dependent_launch("sm_90a"));
  for (const char* target : {"sm_80", "sm_86", "sm_89"}) CHECK_FALSE(gen::has_dependent_launch(target));
  CHECK_THROWS_AS(gen::has_dependent_launch("sm_70"), Error);
}

TEST_CASE("decode: keys split until every reader reads, not when the grid already does") {
  // 1 x 8 KV heads over 512 key tiles, 132 CTAs reading at once: 16 splits of 32 tiles (32
  // would need two rounds of readers for the same tiles).
  CHECK(decode_kv_splits(8, 512, 132) == 16);
  CHECK(decode_kv_splits(8, 512, 264) == 32);
  // The combine's pass costs a split 0.2 tiles: 4 CTAs of 64 tiles take 16 splits of 4 tiles
  // (6 + 2 + 3.2), not 32 of 2 (4 + 2 + 6.4), though 132 readers could take all 128 CTAs.
  CHECK(decode_kv_splits(4, 64, 132) == 16);
  // The best count, not the fewest near it: 29 splits of 256 tiles (9 a split, 18.8) model 2%
  // slower than 32 (8 a split, 18.4), as they ran on an H100 (bench/NOTES.md entry 47).
  CHECK(decode_kv_splits(8, 256, 264) == 32);
  // 16 x 8 KV heads already give every reader but four a CTA: splitting in two only adds the
  // combine.
  CHECK(decode_kv_splits(128, 512, 132) == 1);
  // 512 CTAs of 2048 tiles: splitting evens out the last round by under kSplitMinGain.
  CHECK(decode_kv_splits(512, 2048, 132) == 1);
  CHECK(decode_kv_splits(512, 64, 132) == 1);
  CHECK(decode_kv_splits(8, 1, 132) == 1);
  CHECK(decode_kv_splits(0, 100, 132) == 1);
  // Never past the combine's limit: one CTA of endless tiles models best at 128 splits (782 +
  // 4 + 25.6 tiles; 127 take 788 + 4 + 25.4). Never more splits than tiles.
  CHECK(decode_kv_splits(1, 100000, 100000) == 128);
  CHECK(decode_kv_splits(1, 5, 132) == 5);

  const Spec spec = spec_of(128, 128);
  const ForwardArgs args = decode_args(spec, 1, 32, 8, 1, 32768);
  const gen::Plan plan = decode_plan(spec, "sm_90a", args).launches[0];
  // d128's K and V rows of 512 bytes a key: one reader a multiprocessor; d64's 256, both CTAs
  // a multiprocessor holds.
  const KvSplitRange range = decode_kv_split_range(plan, args, 132);
  CHECK(range.heuristic == 16);
  // 16 x 8 KV heads fill 128 of 132 readers, dense; a paged cache counts both CTAs a
  // multiprocessor holds, and splits in two.
  ForwardArgs b16 = decode_args(spec, 16, 32, 8, 1, 32768);
  CHECK(decode_kv_split_range(decode_plan(spec, "sm_90a", b16).launches[0], b16, 132)
            .heuristic == 1);
  static const int32_t pages[1] = {0};
  b16.block_table = pages;
  b16.page_size = 16;
  b16.max_pages = 2048;
  b16.num_pages = 1;
  CHECK(decode_kv_split_range(decode_plan(spec, "sm_90a", b16).launches[0], b16, 132)
            .heuristic == 2);
  const Spec d64 = spec_of(64, 64);
  const ForwardArgs args64 = decode_args(d64, 1, 32, 8, 1, 32768);
  CHECK(decode_kv_split_range(decode_plan(d64, "sm_90a", args64).launches[0], args64, 132)
            .heuristic == 32);
  CHECK(range.most == kMaxKvSplits);  // 512 key tiles
  // A window bounds the band: 300 keys are 5 tiles of 64, and so are the most splits.
  Spec window = spec;
  window.mask = MaskKind::SlidingWindow;
  window.window_left = 299;
  const gen::Plan windowed = decode_plan(window, "sm_90a", args).launches[0];
  CHECK(decode_kv_split_range(windowed, args, 132).heuristic == 5);
  CHECK(decode_kv_split_range(windowed, args, 132).most == 5);
  // The grid's z holds batch x splits: 40000 sequences leave room for one split.
  const ForwardArgs many = decode_args(spec, 40000, 32, 8, 1, 32768);
  CHECK(decode_kv_split_range(plan, many, 132).most == 1);
}

TEST_CASE("decode: scratch holds the partial O and LSE of every split, none for one") {
  const Spec spec = spec_of(100, 72);
  const ForwardArgs args = decode_args(spec, 3, 8, 2, 5, 4096);
  CHECK(decode_scratch(spec, args, 1).empty());
  const std::vector<ScratchBuffer> scratch = decode_scratch(spec, args, 7);
  REQUIRE(scratch.size() == 2);
  const size_t rows = 7 * 3 * 8 * 5;
  CHECK(scratch[0].bytes == rows * 72 * sizeof(float));
  CHECK(scratch[1].bytes == rows * sizeof(float));
  CHECK(workspace_bytes(scratch) == (rows * 72 * 4 + 255) / 256 * 256 + (rows * 4 + 255) / 256 * 256);
}

TEST_CASE("decode: power-of-two page sizes pass their shift to the kernel, others -1") {
  const Spec spec = spec_of(128, 128);
  for (const auto& [page_size, shift] :
       {std::pair{1, 0}, std::pair{16, 4}, std::pair{256, 8}, std::pair{48, -1}, std::pair{3, -1}}) {
    ForwardArgs args = decode_args(spec, 2, 8, 2, 1, 4096);
    args.page_size = page_size;
    CHECK(make_dec_params(spec, args, 1, nullptr).page_shift == shift);
  }
}

TEST_CASE("decode: the grid covers packed rows of every KV head, times batch and splits") {
  const Spec spec = spec_of(512, 512);  // two V column slices
  const ForwardArgs args = decode_args(spec, 3, 32, 4, 5, 4096);
  const OperationPlan op = decode_plan(spec, "sm_90a", args);
  const LaunchGeometry split = launch_geometry(op.launches[0], args, 132, 6);
  CHECK(split.grid_x == (5 * 8 + op.launches[0].tiles.block_m - 1) / op.launches[0].tiles.block_m);
  CHECK(split.grid_y == 4);
  CHECK(split.grid_z == 3 * 2 * 6);
  const LaunchGeometry combine = launch_geometry(op.launches[1], args, 132, 6);
  CHECK(combine.grid_x == 3 * 32 * 5);  // a CTA a row (batch x query heads x query rows)
  CHECK(combine.grid_y == 1);
  CHECK(combine.block_x == 128);
}

TEST_CASE("decode: KV-cache arguments are checked, each bad one named") {
  const Spec spec = spec_of(128, 128);
  static const int32_t ints[4] = {0, 1, 2, 3};
  ForwardArgs args = decode_args(spec, 2, 8, 2, 1, 64);
  args.block_table = ints;
  args.page_size = 16;
  args.max_pages = 4;
  args.num_pages = 8;
  args.k_stride = args.v_stride = {16 * 2 * 128, 2 * 128, 128};
  CHECK(error_of(spec, args).empty());
  SUBCASE("a capacity below seqlen_k") {
    args.max_pages = 3;
    CHECK(error_of(spec, args).find("at most max_pages * page_size = 3 * 16") != std::string::npos);
  }
  SUBCASE("page sizes without a table") {
    args.block_table = nullptr;
    CHECK(error_of(spec, args).find("leave them 0") != std::string::npos);
  }
  SUBCASE("no pages") {
    args.num_pages = 0;
    CHECK(error_of(spec, args).find("must be >= 1 with a block_table") != std::string::npos);
  }
  SUBCASE("a misaligned length array") {
    args.cache_seqlens = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(ints) + 2);
    CHECK(error_of(spec, args).find("cache_seqlens=") != std::string::npos);
  }
  SUBCASE("decode: never") {
    Spec never = spec;
    never.decode = DecodeMode::Never;
    CHECK(error_of(never, args).find("decode: never") != std::string::npos);
  }
  SUBCASE("with cu_seqlens") {
    args.cu_seqlens_q = args.cu_seqlens_k = ints;
    CHECK(error_of(spec, args).find("not served with cu_seqlens") != std::string::npos);
  }
}

TEST_CASE("merge: arguments are checked, each bad one named") {
  const Spec spec = spec_of(64, 64);
  alignas(256) static char memory[256];
  MergeArgs args;
  args.o_a = args.o_b = args.o = memory;
  args.lse_a = args.lse_b = args.lse = reinterpret_cast<float*>(memory);
  args.batch = 2;
  args.heads = 4;
  args.seqlen = 3;
  args.o_a_stride = args.o_b_stride = args.o_stride = {3 * 4 * 64, 4 * 64, 64};
  const auto error = [&] {
    try {
      check_merge_args(spec, args);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Shape);
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error().empty());
  SUBCASE("a null LSE") {
    args.lse_b = nullptr;
    CHECK(error().find("must be non-null") != std::string::npos);
  }
  SUBCASE("a zero stride") {
    args.o_b_stride.seq = 0;
    CHECK(error().find("o_b_stride.seq = 0") != std::string::npos);
  }
  SUBCASE("no rows") {
    args.seqlen = 0;
    CHECK(error().find("seqlen = 0") != std::string::npos);
  }
  SUBCASE("an O off its element alignment") {
    args.o = memory + 1;
    CHECK(error().find("2-byte aligned") != std::string::npos);
  }
}

TEST_CASE("decode: the kernels compile without spills on sm_80 and sm_90a" * doctest::timeout(300)) {
  test::TempDir cache;
  test::ScopedEnv dir("FLASHJIT_CACHE_DIR", cache.str());
  Runtime runtime;
  Spec spec = spec_of(100, 100);
  spec.causal = true;
  for (const char* target : {"sm_80", "sm_90a"}) {
    const std::vector<CompileReport> reports = runtime.compile_decode(spec, target);
    // 8 rows, m16 and m32 (48 and 64 rows fall back to 32 at d100), dense and paged, the
    // combine, the merge.
    CHECK(reports.size() == 8);
    for (const CompileReport& r : reports) {
      INFO(r.kernel_name);
      CHECK(r.spill_store_bytes == 0);
      CHECK(r.spill_load_bytes == 0);
    }
  }
  Spec sparse = spec;
  sparse.mask = MaskKind::BlockSparse;
  sparse.block_q = sparse.block_k = 128;
  const std::vector<CompileReport> merge_only = runtime.compile_decode(sparse, "sm_90a");
  REQUIRE(merge_only.size() == 1);
  CHECK(merge_only[0].kernel_name.rfind("fa_merge_", 0) == 0);
}

}  // namespace flashjit::rt
