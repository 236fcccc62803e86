#include "tests/gpu/gpu_grid.h"

#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace flashjit::gpu_test {

namespace {

using verify::Layout;
using verify::Shape;

// (head_dim_qk, head_dim_v): the odd and usual single dims, then the qk != v pairs (128/256:
// a pair whose backward pairs the dK/dV/dQ kernel's consumers, as d192's does; d384 and
// 64/512: the paired dK/dV kernel's columns split in two, 64/512's second split without dK
// columns).
const std::vector<std::pair<int, int>>& head_dims() {
  static const std::vector<std::pair<int, int>> dims = [] {
    std::vector<std::pair<int, int>> out;
    for (int d : {1, 8, 40, 64, 72, 80, 96, 100, 112, 128, 136, 160, 192, 200, 256, 320, 384,
                  512})
      out.emplace_back(d, d);
    out.insert(out.end(), {{192, 128}, {128, 64}, {64, 256}, {128, 256}, {64, 512}});
    return out;
  }();
  return dims;
}

// The specs of the grid whose head dims are (dqk, dv).
std::vector<Spec> specs_with(int dqk, int dv) {
  std::vector<Spec> out;
  for (const Spec& spec : grid_specs())
    if (spec.head_dim_qk == dqk && spec.head_dim_v == dv) out.push_back(spec);
  return out;
}

}  // namespace

Spec make_spec(int dqk, int dv, DType dtype, bool causal) {
  Spec spec;
  spec.name = fmt::format("grid_qk{}_v{}_{}{}", dqk, dv, to_string(dtype), causal ? "_causal" : "");
  spec.head_dim_qk = dqk;
  spec.head_dim_v = dv;
  spec.dtype = dtype;
  spec.causal = causal;
  spec.arch = Arch::Auto;
  spec.validate();
  return spec;
}

Shape shape(int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k, Layout layout) {
  Shape s;
  s.batch = batch;
  s.heads_q = heads_q;
  s.heads_kv = heads_kv;
  s.seqlen_q = seqlen_q;
  s.seqlen_k = seqlen_k;
  s.layout = layout;
  return s;
}

std::vector<Spec> grid_specs() {
  std::vector<Spec> specs;
  bool bf16_causal = true;
  for (const auto& [dqk, dv] : head_dims()) {
    const DType causal_dtype = bf16_causal ? DType::BF16 : DType::F16;
    const DType other_dtype = bf16_causal ? DType::F16 : DType::BF16;
    specs.push_back(make_spec(dqk, dv, causal_dtype, true));
    specs.push_back(make_spec(dqk, dv, other_dtype, false));
    bf16_causal = !bf16_causal;
  }
  return specs;
}

std::vector<Spec> window_specs() {
  struct Window {
    int left, right;
    bool causal;
  };
  // Bands narrower and wider than a key block, one-sided and two-sided, the diagonal alone,
  // and the largest a spec allows (2^30 each side: row + left and row - right must not wrap).
  constexpr int kMaxSpan = 1 << 30;
  const Window windows[] = {{37, 5, false},  {200, 0, true},          {0, 0, true},
                            {1000, 300, false}, {5, 70, false},        {kMaxSpan, kMaxSpan, false},
                            {kMaxSpan, 0, true}};
  std::vector<Spec> specs;
  bool bf16 = true;
  for (const auto& [dqk, dv] : std::vector<std::pair<int, int>>{{64, 64}, {100, 100}, {128, 128},
                                                                 {256, 256}, {192, 128}}) {
    for (const Window& w : windows) {
      Spec spec = make_spec(dqk, dv, bf16 ? DType::BF16 : DType::F16, w.causal);
      spec.mask = MaskKind::SlidingWindow;
      spec.window_left = w.left;
      spec.window_right = w.right;
      spec.name += fmt::format("_window{}_{}", w.left, w.right);
      spec.validate();
      specs.push_back(spec);
      bf16 = !bf16;
    }
  }
  return specs;
}

std::vector<GridCase> window_cases() {
  const std::vector<Shape> shapes = {
      shape(1, 2, 1, 1000, 1037),  // band edges inside key blocks, GQA
      shape(2, 3, 1, 300, 257),    // seqlen_q > seqlen_k: causal bands of the top rows are empty
      shape(1, 1, 1, 4097, 4097),  // many blocks skipped on both sides
      shape(1, 2, 2, 1, 1000),     // decoding: one row, one band
  };
  std::vector<GridCase> cases;
  for (const Spec& spec : window_specs())
    for (const Shape& s : shapes) cases.push_back({spec, s});
  return cases;
}

std::vector<GridCase> small_cases() {
  const std::vector<Shape> shapes = {
      shape(2, 6, 2, 17, 128),    // GQA 3:1, seqlen_q < seqlen_k
      shape(1, 3, 1, 128, 17),    // MQA, seqlen_q > seqlen_k: causal rows 0..110 see no key
      shape(3, 4, 4, 1, 1000),    // one query row (decoding)
      shape(1, 2, 1, 1000, 1000),
      shape(2, 2, 2, 17, 1),      // one key: causal rows see it only at the last query row
  };
  std::vector<GridCase> cases;
  for (const Spec& spec : grid_specs())
    for (const Shape& s : shapes) cases.push_back({spec, s});
  return cases;
}

std::vector<GridCase> long_cases() {
  std::vector<GridCase> cases;
  for (const auto& [dqk, dv] : std::vector<std::pair<int, int>>{{64, 64}, {128, 128}, {512, 512},
                                                                 {100, 100}, {192, 128}}) {
    for (const Spec& spec : specs_with(dqk, dv)) {
      cases.push_back({spec, shape(1, 1, 1, 4097, 4097)});
      cases.push_back({spec, shape(1, 2, 1, 1000, 4097)});
      cases.push_back({spec, shape(1, 2, 2, 4097, 1000)});
      cases.push_back({spec, shape(1, 1, 1, 4097, 1)});
      cases.push_back({spec, shape(1, 1, 1, 1, 4097)});
    }
  }
  return cases;
}

std::vector<GridCase> strided_cases() {
  std::vector<GridCase> cases;
  // A padding of 8 elements keeps 16-byte row starts for dims that are multiples of 8 and
  // gives the odd dims 8-, 4- or 2-byte ones; a padding of 3 makes most row starts odd
  // multiples of 2 bytes. The packed QKV views start K and V at heads_q * d elements.
  for (const auto& [dqk, dv] : std::vector<std::pair<int, int>>{{1, 1}, {72, 72}, {100, 100},
                                                                 {136, 136}, {192, 128}}) {
    for (const Spec& spec : specs_with(dqk, dv)) {
      Shape padded = shape(2, 4, 2, 128, 1000, Layout::PaddedHeads);
      padded.head_pad = 8;
      cases.push_back({spec, padded});
      Shape odd_pad = shape(1, 3, 1, 17, 128, Layout::PaddedHeads);
      odd_pad.head_pad = 3;  // rows start at odd element offsets: 2-byte alignment
      cases.push_back({spec, odd_pad});
      if (dqk == dv) cases.push_back({spec, shape(2, 4, 2, 1000, 1000, Layout::PackedQkv)});
    }
  }
  return cases;
}

std::string describe(const GridCase& c) {
  const Shape& s = c.shape;
  std::string layout = verify::to_string(s.layout);
  if (s.layout == Layout::PaddedHeads) layout += fmt::format("+{}", s.head_pad);
  std::string mask;
  switch (c.spec.mask) {
    case MaskKind::None: break;
    case MaskKind::SlidingWindow:
      mask = fmt::format(" window {}/{}", c.spec.window_left, c.spec.window_right);
      break;
    case MaskKind::BlockSparse:
      mask = fmt::format(" bsparse {}x{} layout {}", c.spec.block_q, c.spec.block_k,
                         s.block_visible.empty()
                             ? std::string("random")
                             : fmt::format("{}x{}", s.layout_batch, s.layout_heads));
      break;
    case MaskKind::Pattern:
      mask = fmt::format(" {} b{} w{} s{} g{}", to_string(c.spec.pattern), c.spec.block_q,
                         c.spec.pattern_window, c.spec.pattern_stride, c.spec.pattern_global);
      break;
  }
  if (!s.seqlens_q.empty())
    layout += fmt::format(" varlen q[{}] k[{}]", fmt::join(s.seqlens_q, ","),
                          fmt::join(s.seqlens_k, ","));
  return fmt::format("{:<4} {:<6} qk={:<3} v={:<3}{} | b={} hq={} hkv={} sq={:<4} sk={:<4} {}",
                     to_string(c.spec.dtype), c.spec.causal ? "causal" : "full",
                     c.spec.head_dim_qk, c.spec.head_dim_v, mask, s.batch, s.heads_q,
                     s.heads_kv, s.seqlen_q, s.seqlen_k, layout);
}

}  // namespace flashjit::gpu_test
