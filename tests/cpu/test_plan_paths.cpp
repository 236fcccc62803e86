// Which kernel a plan generates: the warp-specialised sm90 kernel on sm_90a for 16-byte
// aligned tensors, the sm80 kernel everywhere else, and what each path's plan holds.
#include <tuple>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

#include "generator/bwd_dkdv_sm90_path.h"
#include "generator/bwd_dq_sm90_path.h"
#include "generator/fwd_sm80_path.h"
#include "generator/fwd_sm90_path.h"
#include "generator/emit.h"
#include "generator/plan.h"
#include "generator/wgmma_emit.h"
#include "runtime/backward_params.h"
#include "runtime/call_traits.h"
#include "runtime/operation.h"
#include "tests/cpu/runtime_test_support.h"

namespace flashjit::gen {
namespace {

using test::spec_of;

// Only the element type of a spec matters for alignment: every call here is bf16.
const Spec kBf16 = spec_of(64, 64);

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("plan: sm_90a with 16-byte aligned tensors runs the warp-specialised kernel") {
  const Plan p = make_plan(spec_of(128, 128), "sm_90a");
  CHECK(p.path->id == KernelPath::FwdSm90);
  CHECK(p.tiles.block_m == kSm90BlockM);
  CHECK(p.tiles.warps == kSm90Warps);
  CHECK(p.threads == 384);
  CHECK(p.shared_bytes == sm90_shared_bytes(padded_dims(p.spec), p.tiles));
  CHECK(p.kernel_name == "fa_fwd_qk128_v128_bf16_full_ws_n128s3_a16_sm90a");
}

TEST_CASE("launch: the sm90 grid is persistent, at most one CTA a multiprocessor") {
  const Spec s = spec_of(320, 320);  // two V slices: tiles = query blocks x heads x batch x 2
  const Plan sm90 = make_plan(s, "sm_90a");
  REQUIRE(sm90.path->id == KernelPath::FwdSm90);
  REQUIRE(sm90.dv_splits == 2);
  ForwardArgs a = ForwardArgs::contiguous(s, /*batch=*/3, /*heads_q=*/4, /*heads_kv=*/2,
                                          /*seqlen_q=*/1000, /*seqlen_k=*/1000);
  rt::LaunchGeometry g = rt::launch_geometry(sm90, a, 132);
  // 8 query blocks x 4 heads x 3 batches x 2 slices = 192 tiles, more than 132 CTAs.
  CHECK(g.grid_x == 132);
  CHECK(g.grid_y == 1);
  CHECK(g.grid_z == 1);
  CHECK(g.block_x == 384);
  CHECK(g.shared_bytes == static_cast<unsigned>(sm90.shared_bytes));
  a.seqlen_q = 1;  // 1 x 4 x 3 x 2 = 24 tiles: one CTA each
  CHECK(rt::launch_geometry(sm90, a, 132).grid_x == 24);

  // The sm80 kernel keeps a CTA a tile: x query blocks, y heads, z batch x V slices.
  const Plan sm80 = make_plan(s, "sm_80");
  a.seqlen_q = 1000;
  g = rt::launch_geometry(sm80, a, 132);
  CHECK(g.grid_x == static_cast<unsigned>((1000 + sm80.tiles.block_m - 1) / sm80.tiles.block_m));
  CHECK(g.grid_y == 4);
  CHECK(g.grid_z == 3 * static_cast<unsigned>(sm80.dv_splits));
}

TEST_CASE("plan: the sm80 kernel serves other targets, tensors TMA cannot load, arch: sm80") {
  const Spec s = spec_of(128, 128);
  CHECK(make_plan(s, "sm_80").path->id == KernelPath::FwdSm80);
  CHECK(make_plan(s, "sm_89").path->id == KernelPath::FwdSm80);
  // A call TMA cannot load falls back, with the sm80 heuristic's tiles even when the spec
  // fixes (sm90) tiles.
  Spec fixed = s;
  fixed.tiles = Tiles{128, 176, 12, 2};
  const Plan fallback = make_plan(fixed, "sm_90a", {.align_bytes = 8, .tma_loadable = false});
  CHECK(fallback.path->id == KernelPath::FwdSm80);
  CHECK(fallback.tiles == sm80_default_tiles(s, "sm_90a"));
  CHECK(make_plan(fixed, "sm_90a").tiles == fixed.tiles);
  Spec off = s;
  off.warp_specialization = false;
  CHECK(make_plan(off, "sm_90a").path->id == KernelPath::FwdSm80);
  Spec sm80 = s;
  sm80.arch = Arch::Sm80;
  CHECK(make_plan(sm80, "sm_90a").path->id == KernelPath::FwdSm80);
}

TEST_CASE("plan: TMA serves tensors it can address, and ones one 3-d copy can stage") {
  const auto args = [](int d, int heads) {
    ForwardArgs a = ForwardArgs::contiguous(spec_of(d, d), 2, heads, heads, 300, 300);
    a.q = a.k = a.v = reinterpret_cast<const void*>(uintptr_t{1} << 20);
    a.o = reinterpret_cast<void*>(uintptr_t{1} << 21);
    return a;
  };
  CHECK(rt::tma_loadable(kBf16, args(128, 16)));
  CHECK(rt::tma_loadable(kBf16, args(72, 3)));     // 144-byte heads
  CHECK(rt::tma_loadable(kBf16, args(100, 20)));   // 200-byte heads: staged
  CHECK(rt::tma_loadable(kBf16, args(104, 5)));    // 208-byte heads
  ForwardArgs offset = args(128, 16);
  offset.k = reinterpret_cast<const void*>((uintptr_t{1} << 20) + 8);
  CHECK(rt::tma_loadable(kBf16, offset));  // K staged
  // Rows no single 3-d copy can gather (each of batch, sequence and head its own level of
  // unevenly spaced rows) leave the call to the sm80 kernel.
  ForwardArgs scattered = args(100, 20);
  scattered.k_stride = {300 * (20 * 100 + 4) + 12, 20 * 100 + 4, 100};
  CHECK_FALSE(rt::tma_loadable(kBf16, scattered));
  CHECK(rt::forward_alignment(kBf16, offset) == 8);
  // O is stored, not loaded: it bounds the call's alignment but not what TMA can load.
  ForwardArgs o_offset = args(128, 16);
  o_offset.o = reinterpret_cast<void*>((uintptr_t{1} << 21) + 2);
  CHECK(rt::forward_alignment(kBf16, o_offset) == 2);
  CHECK(rt::tma_loadable(kBf16, o_offset));
  CHECK(rt::forward_alignment(kBf16, args(100, 20)) == 8);   // 200-byte head steps
  CHECK(rt::forward_alignment(kBf16, args(100, 1)) == 8);    // 200-byte rows of one head
  CHECK(rt::forward_alignment(kBf16, args(33, 1)) == 2);

  // Packed varlen tensors: their maps need the row counts, and an empty tensor has none.
  const void* base = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  const int seqlens[] = {0, 3};  // cu_seqlens stand-in: only null or not matters here
  ForwardArgs packed = ForwardArgs::varlen(spec_of(128, 128), 4, 8, 2, 300, 257);
  packed.q = packed.k = packed.v = base;
  packed.cu_seqlens_q = packed.cu_seqlens_k = seqlens;
  CHECK_FALSE(rt::tma_loadable(kBf16, packed));  // total_q / total_k not given
  packed.total_q = 700;
  packed.total_k = 0;  // no keys at all
  CHECK_FALSE(rt::tma_loadable(kBf16, packed));
  packed.total_k = 650;
  CHECK(rt::tma_loadable(kBf16, packed));
  CHECK(ForwardArgs::varlen(spec_of(128, 128), 4, 8, 2, 300, 257, 700, 650).total_k == 650);
}

TEST_CASE("plan: every head dim pair gets sm90 tiles that fit, up to 512") {
  for (int dqk : {1, 8, 40, 64, 72, 100, 128, 136, 192, 200, 256, 320, 384, 512})
    for (int dv : {dqk, 64, 256}) {
      CAPTURE(dqk);
      CAPTURE(dv);
      const Plan p = make_plan(spec_of(dqk, dv), "sm_90a");
      CHECK(p.path->id == KernelPath::FwdSm90);
      CHECK(sm90_tiles_problem(padded_dims(p.spec), p.tiles, "sm_90a") == "");
      CHECK(p.shared_bytes <= max_shared_bytes("sm_90a"));
    }
}

TEST_CASE("plan: the sm90 heuristic widens the key block only for unmasked d <= 64") {
  // NOTES entry 10: n176 beats n128 by 6% on unmasked d64 at 16k tokens and loses 2-6% under
  // causal masking.
  CHECK(make_plan(spec_of(64, 64), "sm_90a").tiles == Tiles{128, 176, 12, 3});
  CHECK(make_plan(spec_of(40, 40), "sm_90a").tiles == Tiles{128, 176, 12, 3});
  Spec causal = spec_of(64, 64);
  causal.causal = true;
  CHECK(make_plan(causal, "sm_90a").tiles == Tiles{128, 128, 12, 3});
  CHECK(make_plan(spec_of(128, 128), "sm_90a").tiles == Tiles{128, 128, 12, 3});
}

TEST_CASE("plan: sm90 tiles are checked with reasons") {
  const PaddedDims d128 = padded_dims(spec_of(128, 128)), d256 = padded_dims(spec_of(256, 256));
  CHECK(sm90_tiles_problem(d128, Tiles{64, 128, 4, 2}, "sm_90a").find("block_m 128") !=
        std::string::npos);
  CHECK(sm90_tiles_problem(d128, Tiles{128, 120, 12, 2}, "sm_90a").find("multiple of 16") !=
        std::string::npos);
  CHECK(sm90_tiles_problem(d256, Tiles{128, 128, 12, 2}, "sm_90a").find("shared memory") !=
        std::string::npos);
  CHECK(sm90_tiles_problem(d256, Tiles{128, 112, 12, 1}, "sm_90a").find("at least 2") !=
        std::string::npos);
  CHECK(sm90_tiles_problem(d256, Tiles{128, 144, 12, 2}, "sm_90a") != "");
}

TEST_CASE("wgmma: one instruction per form with N/2 accumulators") {
  const std::string bf16 = emit_wgmma(DType::BF16, 128);
  CHECK(bf16.find("struct Wgmma<128>") != std::string::npos);
  CHECK(count(bf16, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") == 4);
  CHECK(count(bf16, "\"+f\"(d[") == 4 * 64);
  CHECK(bf16.find("%64, %65, acc, 1, 1, 0, 0;") != std::string::npos);           // ss
  CHECK(bf16.find("%64, %65, acc, 1, 1, 1, 1;") != std::string::npos);           // ss_mn
  CHECK(bf16.find("%64, %65, acc, 1, 1, 1, 0;") != std::string::npos);           // ss_a_mn
  CHECK(bf16.find("{%64, %65, %66, %67}, %68, acc, 1, 1, 1;") != std::string::npos);  // rs
  CHECK(emit_wgmma(DType::F16, 8).find("m64n8k16.f32.f16.f16") != std::string::npos);
  CHECK_THROWS_AS(emit_wgmma(DType::BF16, 12), Error);
  CHECK_THROWS_AS(emit_wgmma(DType::BF16, 264), Error);
}

}  // namespace flashjit::gen

namespace flashjit::gen {

TEST_CASE("plan: the backward's sm90 kernels take TMA-loadable calls where K and V fit, and "
          "split dK/dV columns in 64-column panels where registers run short") {
  Spec deterministic = spec_of(128, 128);
  deterministic.deterministic = true;
  Spec deterministic_d192 = spec_of(192, 192);
  deterministic_d192.deterministic = true;
  const rt::OperationPlan d128 = rt::plan_backward(deterministic, "sm_90a", {});
  CHECK(d128.launches[1].path->id == KernelPath::BwdDkDvDqOrderedSm90);
  CHECK(d128.launches[2].path->id == KernelPath::BwdDqConvert);
  CHECK(d128.launches[1].threads == 384);
  CHECK(d128.launches[1].dv_splits == 1);
  CHECK(d128.launches[1].tiles.block_m == 64);
  CHECK(d128.launches[1].kernel_name ==
        "fa_bwd_dkdvdq_ordered_qk128_v128_bf16_full_ws_m64n128s2_a16_sm90a");

  // Deterministic d136: dK and dV whole beside a 48-row query tile (the ordered variant's
  // 64-row tile would not hold them, so the two kernels serve); d192: two CTAs of 128 columns
  // each, which the paired kernel replaces (deterministic: its consumers hold dK and dV of 64
  // keys whole). The dK/dV kernel's own tiles at d64 (which the dQ variants take): the widest
  // preferred that holds dK, dV, S^T and dP^T, 96 rows.
  Spec deterministic_d136 = spec_of(136, 136);
  deterministic_d136.deterministic = true;
  const Plan d136 = rt::plan_backward(deterministic_d136, "sm_90a", {}).launches[1];
  CHECK(d136.path->id == KernelPath::BwdDkDvSm90);
  CHECK(d136.dv_splits == 1);
  CHECK(d136.tiles.block_m == 48);
  const KernelPathInfo& dkdv = kernel_path(KernelPath::BwdDkDvSm90);
  CHECK(dkdv.default_tiles(spec_of(64, 64), "sm_90a", {}).block_m == 96);
  CHECK(dkdv.default_tiles(spec_of(48, 48), "sm_90a", {}).block_m == 128);
  CHECK(dkdv.default_tiles(spec_of(72, 72), "sm_90a", {}).block_m == 96);
  const ColumnSplit d192_split = bwd_dkdv_sm90_column_split(padded_dims(spec_of(192, 192)));
  CHECK(d192_split.splits == 2);
  CHECK(d192_split.dk_slice == 128);
  CHECK(d192_split.dv_slice == 128);
  const Plan d192 = rt::plan_backward(deterministic_d192, "sm_90a", {}).launches[1];
  CHECK(d192.path->id == KernelPath::BwdDkDvPairedSm90);
  CHECK(d192.dv_splits == 1);
  CHECK(d192.dk_slice == 192);
  CHECK(d192.tiles == Tiles{96, fj::budget::kBwdDkDvSm90PairedKeys, 12, 2});

  // d320 pairs the consumers on 64 keys (each holds dK or dV whole, 320 columns in two wgmma
  // products), 48 rows a step in two slots; its dQ takes the sm90 kernel too. Past d368 a
  // consumer's whole columns would not fit beside 32 query rows: two CTAs a key block, each a
  // half of dK's and dV's columns (d384 at 32 rows; d448 and d512, whose Q and dO of 512
  // columns leave room for 16 rows in two slots). Pairs split alike, the last split of the
  // narrower head holding no columns where its half rounds up to its whole (64/512).
  const rt::OperationPlan d320 = rt::plan_backward(spec_of(320, 320), "sm_90a", {});
  CHECK(d320.launches[1].path->id == KernelPath::BwdDkDvPairedSm90);
  CHECK(d320.launches[1].tiles == Tiles{48, fj::budget::kBwdDkDvSm90PairedKeys, 12, 2});
  CHECK(d320.launches[1].dv_splits == 1);
  CHECK(d320.launches[2].path->id == KernelPath::BwdDqSm90);
  CHECK(rt::plan_backward(spec_of(368, 368), "sm_90a", {}).launches[1].dv_splits == 1);
  // Their dQ: 64 query rows a CTA with the consumers paired on them where Q and dO of 128 rows
  // leave no room for a key tile, the widest key tile first (64 keys in one slot at d384 and
  // 256/512, 48 at d448, 32 at d512, whose Q and dO of 64 rows take 128 KB); 128 rows where
  // they fit (128/512, 64/512).
  constexpr int kPairedRows = fj::budget::kBwdDqSm90PairedRows;
  struct Wide {
    int qk, v, block_m, dk_slice, dv_slice;
    KernelPath dq;
    Tiles dq_tiles;
  };
  for (const Wide& w :
       {Wide{384, 384, 32, 192, 192, KernelPath::BwdDqPairedSm90, {kPairedRows, 64, 12, 1}},
        Wide{448, 448, 16, 256, 256, KernelPath::BwdDqPairedSm90, {kPairedRows, 48, 12, 1}},
        Wide{512, 512, 16, 256, 256, KernelPath::BwdDqPairedSm90, {kPairedRows, 32, 12, 1}},
        Wide{256, 512, 32, 128, 256, KernelPath::BwdDqPairedSm90, {kPairedRows, 64, 12, 1}},
        Wide{128, 512, 48, 64, 256, KernelPath::BwdDqSm90, {128, 32, 12, 1}},
        Wide{64, 512, 48, 64, 256, KernelPath::BwdDqSm90, {128, 32, 12, 2}}}) {
    CAPTURE(w.qk);
    CAPTURE(w.v);
    const rt::OperationPlan op = rt::plan_backward(spec_of(w.qk, w.v), "sm_90a", {});
    const Plan& dkdv = op.launches[1];
    CHECK(dkdv.path->id == KernelPath::BwdDkDvPairedSm90);
    CHECK(dkdv.tiles == Tiles{w.block_m, fj::budget::kBwdDkDvSm90PairedKeys, 12, 2});
    CHECK(dkdv.dv_splits == 2);
    CHECK(dkdv.dk_slice == w.dk_slice);
    CHECK(dkdv.dv_slice == w.dv_slice);
    CHECK(op.launches[2].path->id == w.dq);
    CHECK(op.launches[2].tiles == w.dq_tiles);
  }
  const Plan d512_dq = rt::plan_backward(spec_of(512, 512), "sm_90a", {}).launches[2];
  CHECK(d512_dq.kernel_name == "fa_bwd_dq_paired_qk512_v512_bf16_full_ws_n32s1_a16_sm90a");
  Spec block_sparse = spec_of(128, 128);
  block_sparse.mask = MaskKind::BlockSparse;
  block_sparse.block_q = block_sparse.block_k = 128;
  Spec sm80 = spec_of(128, 128);
  sm80.warp_specialization = false;
  for (const Spec& s : {block_sparse, sm80}) {
    const rt::OperationPlan op = rt::plan_backward(s, "sm_90a", {});
    CHECK(op.launches[1].path->id == KernelPath::BwdDkDvSm80);
    CHECK(op.launches[2].path->id == KernelPath::BwdDqSm80);
  }
  const rt::OperationPlan untma =
      rt::plan_backward(spec_of(128, 128), "sm_90a", {.align_bytes = 8, .tma_loadable = false});
  CHECK(untma.launches[1].path->id == KernelPath::BwdDkDvSm80);
  CHECK(untma.launches[2].path->id == KernelPath::BwdDqSm80);
  CHECK(rt::plan_backward(spec_of(128, 128), "sm_80", {}).launches[1].path->id ==
        KernelPath::BwdDkDvSm80);
}

TEST_CASE("plan: without backward.deterministic, sm_90a calls whose dK/dV fit whole beside a "
          "64-row tile accumulate dQ in the dK/dV kernel, then convert it") {
  // 128 query rows a step where the registers hold S^T and dP^T of 128 beside dK and dV and
  // shared memory holds the tiles (d72 and 64/96 in 32- and 64-byte panels), else 64.
  for (const auto& [dqk, dv, block_m] : {std::tuple{64, 64, 128}, {128, 128, 64}, {72, 72, 128},
                                         {80, 80, 128}, {96, 96, 64}, {1, 1, 128}, {48, 48, 128},
                                         {49, 49, 128}, {128, 64, 64}, {32, 64, 128},
                                         {64, 96, 128}}) {
    INFO(dqk, "/", dv);
    const rt::OperationPlan op = rt::plan_backward(spec_of(dqk, dv), "sm_90a", {});
    REQUIRE(op.launches.size() == 3);
    CHECK(op.launches[1].path->id == KernelPath::BwdDkDvDqSm90);
    CHECK(op.launches[1].path->accumulates_dq);
    CHECK(op.launches[1].tiles.block_m == block_m);
    CHECK(op.launches[1].tiles.stages == 2);
    CHECK(op.launches[1].dv_splits == 1);
    CHECK(op.launches[1].kernel_name.starts_with("fa_bwd_dkdvdq_"));
    CHECK(op.launches[2].path->id == KernelPath::BwdDqConvert);
    // The conversion reads dq_accum by the dK/dV kernel's column split.
    CHECK(op.launches[2].dk_slice == op.launches[1].dk_slice);
    CHECK(op.launches[2].dv_splits == op.launches[1].dv_splits);
  }
  // Panels of 128-byte rows where the tiles fit so; d72's and 64/96's 128 query rows fit only
  // in narrower ones (32 and 64 bytes: no padding columns), which the tensor maps swizzle alike.
  for (const auto& [dqk, dv, row_bytes] : {std::tuple{64, 64, 128}, {72, 72, 32}, {80, 80, 32},
                                           {64, 96, 64}, {96, 96, 128}, {100, 100, 128},
                                           {128, 128, 128}, {192, 192, 128}}) {
    INFO(dqk, "/", dv);
    const Plan p = rt::plan_backward(spec_of(dqk, dv), "sm_90a", {}).launches[1];
    CHECK(p.panel_row_bytes == row_bytes);
    CHECK(gen::emit_source(p).find(fmt::format("kPanelRowBytes = {};", row_bytes)) !=
          std::string::npos);
  }
  // Where the dK/dV kernel would split the columns over CTAs and two ring slots fit, 64 keys
  // a CTA pair the consumers (whole columns, 64 query rows a step), at qk dims up to 128.
  for (const auto& [dqk, dv] : {std::pair{128, 256}, {112, 240}}) {
    INFO(dqk, "/", dv);
    const rt::OperationPlan op = rt::plan_backward(spec_of(dqk, dv), "sm_90a", {});
    CHECK(op.launches[1].path->id == KernelPath::BwdDkDvDqSm90);
    CHECK(op.launches[1].tiles == Tiles{64, fj::budget::kBwdDkDvSm90PairedKeys, 12, 2});
    CHECK(op.launches[1].dv_splits == 1);
    CHECK(op.launches[2].path->id == KernelPath::BwdDqConvert);
    CHECK(op.launches[2].dk_slice == op.launches[1].dk_slice);
  }
  // Where neither serves and 64 query rows a step fit beside 96 keys, the consumers take 48
  // keys each with their products swapped (whole columns, the paths' rules both ways): in two
  // ring slots, else (d136-d192) Q in two and dO in one.
  for (const auto& [dqk, dv, stages] :
       {std::tuple{192, 128, 2}, {64, 256, 2}, {160, 128, 2}, {176, 128, 2}, {128, 192, 2},
        {136, 136, 1}, {160, 160, 1}, {176, 176, 1}, {192, 192, 1}}) {
    INFO(dqk, "/", dv);
    const rt::OperationPlan op = rt::plan_backward(spec_of(dqk, dv), "sm_90a", {});
    CHECK(op.launches[1].path->id == KernelPath::BwdDkDvDqSm90);
    CHECK(op.launches[1].tiles == Tiles{64, fj::budget::kBwdDkDvSm90SwappedKeys, 12, stages});
    CHECK(op.launches[1].panel_row_bytes == 128);
    CHECK(op.launches[2].path->id == KernelPath::BwdDqConvert);
  }
  // Deterministic unsplit heads take the two deterministic kernels; heads past what the swapped
  // consumers hold (d200, d256; d320, whose dQ shares would pass wgmma's N) and deterministic
  // split ones, the paired dK/dV kernel and the dQ kernel.
  Spec deterministic_d136 = spec_of(136, 136);
  deterministic_d136.deterministic = true;
  Spec deterministic_d192 = spec_of(192, 192);
  deterministic_d192.deterministic = true;
  for (const Spec& s : {deterministic_d136, spec_of(320, 320), spec_of(200, 200),
                        spec_of(256, 256), deterministic_d192}) {
    INFO(s.head_dim_qk, "/", s.head_dim_v);
    const bool split = s.head_dim_qk != 136 && s.head_dim_qk + s.head_dim_v > 336;
    const rt::OperationPlan op = rt::plan_backward(s, "sm_90a", {});
    CHECK(op.launches[1].path->id ==
          (split ? KernelPath::BwdDkDvPairedSm90 : KernelPath::BwdDkDvSm90));
    CHECK(op.launches[2].path->id == KernelPath::BwdDqSm90);
  }
  const rt::OperationPlan varlen = rt::plan_backward(spec_of(128, 128), "sm_90a", {.varlen = true});
  CHECK(varlen.launches[1].path->id == KernelPath::BwdDkDvDqSm90);
  CHECK(varlen.launches[2].path->id == KernelPath::BwdDqConvert);
  // The variant's rules name what they refuse.
  const PaddedDims d128 = padded_dims(spec_of(128, 128));
  const KernelPathInfo& dq = kernel_path(KernelPath::BwdDkDvDqSm90);
  CHECK(dq.tiles_problem(d128, Tiles{32, 128, 12, 2}, "sm_90a").find("must be 64 or 128") !=
        std::string::npos);
  CHECK(dq.tiles_problem(d128, Tiles{128, 128, 12, 2}, "sm_90a").find("registers") !=
        std::string::npos);
  CHECK(dq.tiles_problem(d128, Tiles{64, 128, 12, 1}, "sm_90a").find("two slots") != std::string::npos);
  const PaddedDims d192_128 = padded_dims(spec_of(192, 128));
  CHECK(dq.tiles_problem(d192_128, Tiles{64, 96, 12, 2}, "sm_90a").empty());
  CHECK(dq.tiles_problem(d192_128, Tiles{128, 96, 12, 2}, "sm_90a").find("swapped") !=
        std::string::npos);
  CHECK(dq.tiles_problem(padded_dims(spec_of(192, 192)), Tiles{64, 96, 12, 2}, "sm_90a")
            .find("bytes of shared memory") != std::string::npos);
  CHECK(kernel_path(KernelPath::BwdDkDvDqOrderedSm90)
            .tiles_problem(d192_128, Tiles{64, 96, 12, 2}, "sm_90a")
            .find("any order") != std::string::npos);
  CHECK(dq.tiles_problem(padded_dims(spec_of(192, 192)), Tiles{64, 128, 12, 2}, "sm_90a")
            .find("registers") != std::string::npos);
  CHECK(dq.tiles_problem(padded_dims(spec_of(192, 192)), Tiles{64, 64, 12, 2}, "sm_90a") == "");
  CHECK(dq.tiles_problem(padded_dims(spec_of(192, 192)), Tiles{32, 64, 12, 2}, "sm_90a")
            .find("paired") != std::string::npos);
  CHECK(dq.tiles_problem(padded_dims(spec_of(256, 256)), Tiles{64, 64, 12, 2}, "sm_90a")
            .find("bytes of shared memory") != std::string::npos);
  CHECK(dq.tiles_problem(padded_dims(spec_of(320, 320)), Tiles{64, 64, 12, 1}, "sm_90a")
            .find("wgmma N") != std::string::npos);
  CHECK(dq.tiles_problem(d128, Tiles{64, 128, 12, 2}, "sm_90a") == "");
}

TEST_CASE("plan: the sm90 dK/dV kernel runs head-dim products on live columns in narrow panels") {
  namespace b = fj::budget;
  // wgmma's N steps by 8 where a head dim pads to 16: the columns that reach the head dim.
  CHECK(b::live_cols(80, 72) == 72);
  CHECK(b::live_cols(80, 66) == 72);
  CHECK(b::live_cols(80, 80) == 80);
  CHECK(b::live_cols(48, 72 - 64) == 8);  // a second dQ share's columns
  CHECK(b::live_cols(80, 0) == 80);       // 0: the whole product
  CHECK(b::live_cols(64, 100) == 64);
  // Only unsplit heads in panels narrower than 128 bytes (d100 in 128-byte ones ran slower).
  CHECK(b::bwd_dkdv_sm90_live_widths(1, 32));
  CHECK(b::bwd_dkdv_sm90_live_widths(1, 64));
  CHECK_FALSE(b::bwd_dkdv_sm90_live_widths(1, 128));
  CHECK_FALSE(b::bwd_dkdv_sm90_live_widths(2, 32));
  // The emitted source holds the live widths' wgmma shapes (d72: 72 beside the padded 80),
  // and none where the panels are 128 bytes (d100: 112, not 104).
  const std::string d72 =
      emit_source(rt::plan_backward(spec_of(72, 72), "sm_90a", {}).launches[1]);
  CHECK(d72.find("m64n72k16") != std::string::npos);
  const std::string d100 =
      emit_source(rt::plan_backward(spec_of(100, 100), "sm_90a", {}).launches[1]);
  CHECK(d100.find("m64n112k16") != std::string::npos);
  CHECK(d100.find("m64n104k16") == std::string::npos);
}

TEST_CASE("plan: the dQ variant's shared memory holds its dS^T tiles and staged dQ shares") {
  namespace b = fj::budget;
  // d128: consumer shares of 64 columns, 16 KB of staged fp32 each, two 16 KB dS^T tiles.
  CHECK(b::bwd_dkdv_sm90_dq_cols0(128) == 64);
  CHECK(b::bwd_dkdv_sm90_dq_cols0(64) == 32);
  CHECK(b::bwd_dkdv_sm90_dq_cols0(80) == 64);    // one panel, then the rest of the next
  CHECK(b::bwd_dkdv_sm90_dq_cols0(208) == 128);  // whole panels: 128 + 80
  CHECK(b::bwd_dkdv_sm90_dq_stage_bytes(128, 64, 0) == 64 * 64 * 4);
  CHECK(b::bwd_dkdv_sm90_dq_stage_bytes(128, 64, 1) == 64 * 64 * 4);
  CHECK(b::bwd_dkdv_sm90_dq_stage_bytes(80, 64, 0) == 64 * 64 * 4);
  CHECK(b::bwd_dkdv_sm90_dq_stage_bytes(80, 64, 1) == 64 * 16 * 4);  // each share its own
  // At 128 rows a step a consumer stages a 64-row block of every column.
  CHECK(b::bwd_dkdv_sm90_dq_rows_split(128));
  CHECK(b::bwd_dkdv_sm90_dq_cols(48, 128) == 48);
  CHECK(b::bwd_dkdv_sm90_dq_stage_bytes(48, 128, 0) == 64 * 48 * 4);
  CHECK(b::bwd_dkdv_sm90_dq_stage_bytes(48, 128, 1) == 64 * 48 * 4);
  // dS^T's two tiles, the staged dQ tiles, a mailbox a consumer to the dQ writer.
  constexpr int mailboxes = 2 * b::kDqMailboxBytes;
  CHECK(b::bwd_dkdv_sm90_dq_bytes(2, 48, 128, 128, 2) ==
        2 * 128 * 128 * 2 + 2 * 64 * 48 * 4 + mailboxes);
  CHECK(b::bwd_dkdv_sm90_dq_bytes(2, 128, 64, 128, 2) ==
        2 * 128 * 64 * 2 + 2 * 64 * 64 * 4 + mailboxes);
  // Paired consumers (64 keys) add P^T in fp32 and its mbarriers, with dQ or without.
  CHECK(b::bwd_dkdv_sm90_dq_bytes(2, 192, 64, 64, 2) ==
        2 * 64 * 64 * 2 + 64 * (128 + 64) * 4 + mailboxes);
  CHECK(b::bwd_dkdv_sm90_pt_bytes(96, 64) == 64 * 96 * 4 + 16);
  CHECK(b::bwd_dkdv_sm90_pt_bytes(64, 128) == 0);
  CHECK(b::bwd_dkdv_sm90_shared_bytes(2, 128, 192, 192, 192, 192, 1, 96, 64, 2, 0) ==
        (6 * 64 + 6 * 2 * 96) * 128 + (64 * 96 * 4 + 16) + 2 * 96 * 8 + 8 * 5);
  // Narrower panels (32-byte rows: 80 columns in 160 bytes, not 256), the head tiles then
  // aligned to 1024 bytes for the 128-byte swizzled dS^T.
  CHECK(b::bwd_sm90_panel_row_bytes(80, 80, 2) == 32);
  CHECK(b::bwd_sm90_panel_row_bytes(96, 96, 2) == 64);
  CHECK(b::bwd_sm90_panel_row_bytes(128, 64, 2) == 128);
  CHECK(b::bwd_dkdv_sm90_shared_bytes(2, 32, 80, 80, 80, 80, 1, 48, 128, 2, 0) ==
        b::align_1024((2 * 128 + 2 * 2 * 48) * 160) + 2 * 48 * 8 + 8 * 5);
  const Plan p = rt::plan_backward(spec_of(128, 128), "sm_90a", {}).launches[1];
  CHECK(p.shared_bytes ==
        b::bwd_dkdv_sm90_shared_bytes(2, 128, 128, 128, 128, 128, 1, 64, 128, 2, 0) +
            b::bwd_dkdv_sm90_dq_bytes(2, 128, 64, 128, 2));
  // Swapped consumers (96 keys) add their 16-bit P^T; at one slot Q keeps two, dO and dS^T
  // take one, and dO has its own mbarriers.
  CHECK(b::bwd_dkdv_sm90_pt_bytes(64, 96) == 96 * 64 * 2);
  CHECK(b::bwd_dkdv_sm90_dq_bytes(2, 192, 64, 96, 1) ==
        96 * 64 * 2 + 64 * (128 + 64) * 4 + mailboxes);
  CHECK(b::bwd_dkdv_sm90_shared_bytes(2, 128, 192, 192, 192, 192, 1, 64, 96, 1, 0) ==
        (6 * 96 + (3 * 2 + 3) * 64) * 128 + 96 * 64 * 2 + 2 * 64 * 8 + 8 * 5 + 16);
  CHECK(b::bwd_dkdv_sm90_shared_bytes(2, 128, 192, 128, 192, 128, 1, 64, 96, 2, 0) ==
        (5 * 96 + 5 * 2 * 64) * 128 + 96 * 64 * 2 + 2 * 64 * 8 + 8 * 5);
}

TEST_CASE("plan: the backward's scratch holds dq_accum's blocks when dK/dV accumulates dQ") {
  const Spec s = spec_of(128, 128);
  const ForwardArgs f = ForwardArgs::contiguous(s, 2, 8, 2, 300, 300);
  const std::vector<rt::ScratchBuffer> fused =
      rt::backward_scratch(rt::plan_backward(s, "sm_90a", {}), f);
  REQUIRE(fused.size() == 2);
  CHECK(fused[0].name == "d_rows");
  CHECK(fused[0].bytes == 4 * 600 * 8);  // D: a float a row and head
  CHECK_FALSE(fused[0].zeroed);
  // A head's 600 / 64 + batch + 1 blocks of 64 rows x 128 columns (templates/attn/dq_accum.cuh).
  CHECK(fused[1].name == "dq_accum");
  CHECK(fused[1].bytes == size_t{4} * 8 * (600 / 64 + 2 + 1) * 64 * 128);
  CHECK(fused[1].zeroed);
  // In key-block order, then two counters a block, zeroed too.
  Spec deterministic = s;
  deterministic.deterministic = true;
  const std::vector<rt::ScratchBuffer> ordered =
      rt::backward_scratch(rt::plan_backward(deterministic, "sm_90a", {}), f);
  REQUIRE(ordered.size() == 3);
  CHECK(ordered[1].bytes == fused[1].bytes);
  CHECK(ordered[2].name == "dq_turns");
  CHECK(ordered[2].bytes == size_t{4} * 2 * 8 * (600 / 64 + 2 + 1));
  CHECK(ordered[2].zeroed);
  // The two kernels pass D alone.
  Spec two_kernels = spec_of(200, 200);
  CHECK(rt::backward_scratch(rt::plan_backward(two_kernels, "sm_90a", {}), f).size() == 1);
  // The launches find their buffers by name; a staged tensor's buffer after them is not one.
  std::vector<rt::ScratchBuffer> with_staged = ordered;
  with_staged.push_back({"k_rows", 4096});
  void* base = reinterpret_cast<void*>(uintptr_t{1} << 30);  // never dereferenced
  const std::vector<void*> at = rt::scratch_pointers(with_staged, base);
  BackwardArgs args;
  args.forward = f;
  const BwdParams p = rt::make_bwd_params(deterministic, args, with_staged, at);
  CHECK(p.d_rows == at[0]);
  CHECK(p.dq_accum == at[1]);
  CHECK(p.dq_turns == at[2]);
  const std::vector<rt::ScratchBuffer> d_rows_only = {ordered[0], {"k_rows", 4096}};
  const BwdParams q = rt::make_bwd_params(two_kernels, args, d_rows_only,
                                          rt::scratch_pointers(d_rows_only, base));
  CHECK(q.dq_accum == nullptr);
  CHECK(q.dq_turns == nullptr);
}

TEST_CASE("plan: the backward's TMA traits take dO's rows into account too") {
  const Spec spec = spec_of(128, 128);
  ForwardArgs f = ForwardArgs::contiguous(spec, 2, 8, 2, 300, 300);
  f.q = f.k = f.v = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  f.o = reinterpret_cast<void*>(uintptr_t{1} << 21);
  BackwardArgs a;
  a.forward = f;
  a.d_o = reinterpret_cast<const void*>(uintptr_t{1} << 22);
  a.d_o_stride = f.o_stride;
  CHECK(rt::backward_tma_loadable(spec, a));
  a.d_o = reinterpret_cast<const void*>((uintptr_t{1} << 22) + 8);
  CHECK(rt::backward_tma_loadable(spec, a));  // dO staged
  a.d_o_stride = {300 * 1024, 1024, 64};  // heads overlapping: no copy gathers them
  CHECK_FALSE(rt::backward_tma_loadable(spec, a));
}

TEST_CASE("plan: the backward's sm90 tiles are checked with reasons") {
  const PaddedDims d128 = padded_dims(spec_of(128, 128));
  CHECK(bwd_dkdv_sm90_tiles_problem(d128, {64, 128, 12, 2}, "sm_90a").empty());
  CHECK(bwd_dkdv_sm90_tiles_problem(d128, {64, 64, 12, 2}, "sm_90a").find("block_n 128") !=
        std::string::npos);
  CHECK(bwd_dkdv_sm90_tiles_problem(d128, {40, 128, 12, 2}, "sm_90a").find("multiple of 16") !=
        std::string::npos);
  CHECK(bwd_dkdv_sm90_tiles_problem(d128, {80, 128, 12, 2}, "sm_90a").find("registers") !=
        std::string::npos);
  // d320: K and V take 160 KB, so one ring slot of 32 query rows; dQ runs 256 + 64 columns.
  const PaddedDims d320 = padded_dims(spec_of(320, 320));
  CHECK(bwd_dkdv_sm90_tiles_problem(d320, {32, 128, 12, 1}, "sm_90a").empty());
  CHECK(bwd_dkdv_sm90_tiles_problem(d320, {32, 128, 12, 2}, "sm_90a").find("shared memory") !=
        std::string::npos);
  CHECK(bwd_dq_sm90_tiles_problem(d320, {128, 32, 12, 1}, "sm_90a").empty());
  CHECK(bwd_dq_sm90_tiles_problem(d320, {128, 48, 12, 1}, "sm_90a").find("registers") !=
        std::string::npos);
  CHECK(bwd_dq_sm90_tiles_problem(d128, {128, 96, 12, 2}, "sm_90a").empty());
  CHECK(bwd_dq_sm90_tiles_problem(d128, {128, 128, 12, 2}, "sm_90a").find("registers") !=
        std::string::npos);
  CHECK(bwd_dq_sm90_tiles_problem(d128, {64, 96, 12, 2}, "sm_90a").find("block_m 128") !=
        std::string::npos);
  CHECK(bwd_dq_sm90_tiles_problem(padded_dims(spec_of(256, 256)), {128, 64, 12, 2}, "sm_90a")
            .find("bytes of shared memory") != std::string::npos);
}

}  // namespace flashjit::gen
