#include "verify/attention_run.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/driver.h"
#include "verify/half.h"
#include "verify/reference.h"

namespace flashjit::verify {

namespace {

// Poisoned elements after O and LSE: a kernel writing past the end of its output is caught.
constexpr int64_t kGuardElements = 256;
// Q, K and V share one allocation; each starts on a 128-byte boundary unless packed.
constexpr int64_t kTensorAlignElements = 64;

int64_t align_up(int64_t value, int64_t to) { return (value + to - 1) / to * to; }

// Where Q, K, V (one input buffer) and O (one output buffer) live, in elements.
struct Placement {
  int64_t q_offset = 0, k_offset = 0, v_offset = 0;
  TensorStrides q, k, v, o;
  int64_t input_elements = 0, o_elements = 0;
};

TensorStrides strides_for(int seqlen, int heads, int64_t head_stride) {
  TensorStrides s;
  s.head = head_stride;
  s.seq = heads * head_stride;
  s.batch = seqlen * s.seq;
  return s;
}

bool is_varlen(const Shape& shape) { return !shape.seqlens_q.empty(); }

int sum(const std::vector<int>& values) {
  int total = 0;
  for (int x : values) total += x;
  return total;
}

// A varlen batch is one "batch" of packed rows (total tokens); a fixed one has `batch` of
// seqlen rows each.
int batches(const Shape& s) { return is_varlen(s) ? 1 : s.batch; }
int q_rows(const Shape& s) { return is_varlen(s) ? sum(s.seqlens_q) : s.seqlen_q; }
int k_rows(const Shape& s) { return is_varlen(s) ? sum(s.seqlens_k) : s.seqlen_k; }

std::vector<int> prefix_sums(const std::vector<int>& lengths) {
  std::vector<int> cu{0};
  for (int n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

Placement place(const Spec& spec, const Shape& shape) {
  const int dqk = spec.head_dim_qk, dv = spec.head_dim_v;
  Placement p;
  if (shape.layout == Layout::PackedQkv) {
    if (is_varlen(shape))
      throw Error(ErrorKind::Shape, "varlen shapes take the contiguous or padded-heads layout");
    if (shape.seqlen_q != shape.seqlen_k || dqk != dv)
      throw Error(ErrorKind::Shape,
                  fmt::format("packed QKV layout needs seqlen_q == seqlen_k and head_dim_qk == "
                              "head_dim_v (got {} / {} and {} / {})",
                              shape.seqlen_q, shape.seqlen_k, dqk, dv));
    const int heads_total = shape.heads_q + 2 * shape.heads_kv;
    const TensorStrides packed = strides_for(shape.seqlen_q, heads_total, dqk);
    p.q = p.k = p.v = packed;
    p.k_offset = int64_t{shape.heads_q} * dqk;
    p.v_offset = int64_t{shape.heads_q + shape.heads_kv} * dqk;
    p.input_elements = shape.batch * packed.batch;
    p.o = strides_for(shape.seqlen_q, shape.heads_q, dv);
    p.o_elements = shape.batch * p.o.batch;
    return p;
  }
  const int pad = shape.layout == Layout::PaddedHeads ? shape.head_pad : 0;
  if (pad < 0) throw Error(ErrorKind::Shape, fmt::format("head_pad {} is negative", pad));
  // max(1, rows): an all-empty varlen batch still gets a (never read) row.
  const int nq = std::max(1, q_rows(shape)), nk = std::max(1, k_rows(shape));
  p.q = strides_for(nq, shape.heads_q, dqk + pad);
  p.k = strides_for(nk, shape.heads_kv, dqk + pad);
  p.v = strides_for(nk, shape.heads_kv, dv + pad);
  p.o = strides_for(nq, shape.heads_q, dv + pad);
  const int n = batches(shape);
  p.k_offset = align_up(n * p.q.batch, kTensorAlignElements);
  p.v_offset = align_up(p.k_offset + n * p.k.batch, kTensorAlignElements);
  p.input_elements = p.v_offset + n * p.v.batch;
  p.o_elements = n * p.o.batch;
  return p;
}

// Calls fn(element offset) for every element of a [batch, seq, heads, dim] tensor, in the
// order of its contiguous layout.
template <class Fn>
void for_each_element(int batch, int seqlen, int heads, int dim, const TensorStrides& s, Fn fn) {
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < seqlen; ++i)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < dim; ++d) fn(b * s.batch + i * s.seq + h * s.head + d);
}

// Tolerances against the fp64 reference computed from the same rounded inputs. What remains
// is the kernel's own rounding: P rounded to the dtype before P·V (relative 2^-9 for bf16,
// 2^-12 for fp16, per element, random signs) and O rounded at the end (same relative size),
// fp32 accumulation being negligible next to that. With randn inputs |O| <= ~4 (one dominant
// key) and usually far smaller, so a correct bf16 kernel stays below ~1.5e-2 absolute and
// ~5e-3 in relative L2 norm; fp16 has 3 more mantissa bits, hence 4x tighter bounds.
// A wrong kernel misses by far more: an off-by-one causal mask or a dropped key moves a row
// of seqlen 17 by ~1/17 of a value of O(1) (~0.06), a missing tile or a wrong GQA head is an
// O(1) error, an unwritten element stays NaN. A single missing key among 4097 (~5e-4) hides
// under any rounding-aware bound, which is why the grid also holds short and odd seqlens.
// LSE is fp32 from fp32 sums (no dtype rounding): 1e-3 absolute leaves a wide margin over
// its ~1e-6 error while a missing key of 17 moves it by ~0.06.
Tolerances make_tolerances(DType dtype) {
  Tolerances t;
  if (dtype == DType::BF16) {
    t.o = {.atol = 2e-2, .rtol = 2e-2};
    t.o_rel_l2 = 2e-2;
  } else {
    t.o = {.atol = 5e-3, .rtol = 5e-3};
    t.o_rel_l2 = 5e-3;
  }
  t.lse = {.atol = 1e-3, .rtol = 0};
  return t;
}

// Shape checks beyond the sizes: varlen lengths and the block-sparse matrix.
void check_mask_shape(const Spec& spec, const Shape& shape) {
  if (is_varlen(shape)) {
    const auto fits = [&](const std::vector<int>& lengths, int longest) {
      return static_cast<int>(lengths.size()) == shape.batch &&
             std::all_of(lengths.begin(), lengths.end(), [](int n) { return n >= 0; }) &&
             longest == std::max(1, *std::max_element(lengths.begin(), lengths.end()));
    };
    if (!fits(shape.seqlens_q, shape.seqlen_q) || !fits(shape.seqlens_k, shape.seqlen_k))
      throw Error(ErrorKind::Shape,
                  fmt::format("varlen shape: seqlens_q [{}] and seqlens_k [{}] must hold batch = "
                              "{} lengths >= 0 whose maxima (at least 1) are seqlen_q {} and "
                              "seqlen_k {} (use varlen_shape)",
                              fmt::join(shape.seqlens_q, ", "), fmt::join(shape.seqlens_k, ", "),
                              shape.batch, shape.seqlen_q, shape.seqlen_k));
  }
  if (spec.mask != MaskKind::BlockSparse) {
    if (!shape.block_visible.empty())
      throw Error(ErrorKind::Shape, fmt::format("a block layout is given but spec {} has mask {}",
                                                spec.name, to_string(spec.mask)));
    return;
  }
  if (shape.block_visible.empty()) return;  // drawn at random by run_attention
  const size_t want = static_cast<size_t>(shape.layout_batch) * shape.layout_heads *
                      ((shape.seqlen_q + spec.block_q - 1) / spec.block_q) *
                      ((shape.seqlen_k + spec.block_k - 1) / spec.block_k);
  if (shape.block_visible.size() != want)
    throw Error(ErrorKind::Shape,
                fmt::format("block_visible holds {} entries; layout {} x {} of {}x{} blocks over "
                            "seqlens {} / {} needs {}", shape.block_visible.size(),
                            shape.layout_batch, shape.layout_heads, spec.block_q, spec.block_k,
                            shape.seqlen_q, shape.seqlen_k, want));
}

// The shape with a random block layout (density 1/2, one for all batches and heads) when a
// block_sparse spec has none; drawn from its own generator so the inputs stay those of `seed`.
Shape with_layout(const Spec& spec, Shape shape, uint64_t seed) {
  if (spec.mask != MaskKind::BlockSparse || !shape.block_visible.empty()) return shape;
  const int q_blocks = (shape.seqlen_q + spec.block_q - 1) / spec.block_q;
  const int k_blocks = (shape.seqlen_k + spec.block_k - 1) / spec.block_k;
  std::mt19937_64 engine(seed);
  shape.layout_batch = shape.layout_heads = 1;
  shape.block_visible.resize(static_cast<size_t>(q_blocks) * k_blocks);
  for (uint8_t& x : shape.block_visible) x = static_cast<uint8_t>(engine() & 1);
  return shape;
}

AttentionProblem problem_of(const Spec& spec, const Shape& shape) {
  AttentionProblem p;
  p.batch = shape.batch;
  p.heads_q = shape.heads_q;
  p.heads_kv = shape.heads_kv;
  p.seqlen_q = shape.seqlen_q;
  p.seqlen_k = shape.seqlen_k;
  p.head_dim_qk = spec.head_dim_qk;
  p.head_dim_v = spec.head_dim_v;
  p.causal = spec.causal;
  p.window = spec.mask == MaskKind::SlidingWindow;
  p.window_left = spec.window_left;
  p.window_right = spec.window_right;
  if (is_varlen(shape)) {
    p.cu_seqlens_q = prefix_sums(shape.seqlens_q);
    p.cu_seqlens_k = prefix_sums(shape.seqlens_k);
  }
  if (spec.mask == MaskKind::BlockSparse || spec.mask == MaskKind::Pattern) {
    p.block_q = spec.block_q;
    p.block_k = spec.block_k;
    p.q_blocks = (shape.seqlen_q + spec.block_q - 1) / spec.block_q;
    p.k_blocks = (shape.seqlen_k + spec.block_k - 1) / spec.block_k;
    if (spec.mask == MaskKind::Pattern) {
      p.block_visible = pattern_block_matrix(spec, p.q_blocks, p.k_blocks);
    } else {
      if (shape.block_visible.empty())
        throw Error(ErrorKind::Shape, fmt::format("spec {} is block_sparse: the shape needs its "
                                                  "block_visible layout", spec.name));
      p.block_batch = shape.layout_batch;
      p.block_heads = shape.layout_heads;
      p.block_visible = shape.block_visible;
    }
  }
  return p;
}

void check_user_inputs(const Spec& spec, const Shape& shape, const UserInputs& in) {
  const auto expect = [](const char* name, size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want)
      throw Error(ErrorKind::Shape, fmt::format("{} holds {} values, the shape needs {}", name,
                                                got, want));
  };
  const int64_t nq = int64_t{batches(shape)} * q_rows(shape);
  const int64_t nk = int64_t{batches(shape)} * k_rows(shape);
  expect("q", in.q.size(), nq * shape.heads_q * spec.head_dim_qk);
  expect("k", in.k.size(), nk * shape.heads_kv * spec.head_dim_qk);
  expect("v", in.v.size(), nk * shape.heads_kv * spec.head_dim_v);
}

std::string describe_failure(const RunResult& r, const Tolerances& t) {
  std::vector<std::string> why;
  if (r.o.nan) why.push_back(fmt::format("{} O elements NaN (unwritten or computed)", r.o.nan));
  if (r.o.over_tolerance)
    why.push_back(fmt::format("{} O elements beyond atol {} + rtol {} (worst at {}: {:.3g})",
                              r.o.over_tolerance, t.o.atol, t.o.rtol, r.o.worst, r.o.max_abs));
  if (r.o.rel_l2 > t.o_rel_l2)
    why.push_back(fmt::format("O relative L2 error {:.3g} > {}", r.o.rel_l2, t.o_rel_l2));
  if (r.lse.nan) why.push_back(fmt::format("{} LSE elements NaN", r.lse.nan));
  if (r.lse.inf_mismatch)
    why.push_back(fmt::format("{} LSE elements -inf on one side only (first at {})",
                              r.lse.inf_mismatch, r.lse.worst));
  if (r.lse.over_tolerance)
    why.push_back(fmt::format("{} LSE elements beyond atol {} (worst {:.3g})",
                              r.lse.over_tolerance, t.lse.atol, r.lse.max_abs));
  if (r.o_outside_writes)
    why.push_back(fmt::format("{} elements written outside O / LSE", r.o_outside_writes));
  return fmt::format("{}", fmt::join(why, "; "));
}

double median(std::vector<float> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

const char* to_string(Layout layout) {
  switch (layout) {
    case Layout::Contiguous: return "contiguous";
    case Layout::PaddedHeads: return "padded-heads";
    case Layout::PackedQkv: return "packed-qkv";
  }
  return "?";
}

Tolerances tolerances_for(DType dtype) { return make_tolerances(dtype); }

Shape varlen_shape(int heads_q, int heads_kv, std::vector<int> seqlens_q,
                   std::vector<int> seqlens_k) {
  Shape s;
  s.batch = static_cast<int>(seqlens_q.size());
  s.heads_q = heads_q;
  s.heads_kv = heads_kv;
  const auto longest = [](const std::vector<int>& v) {
    return v.empty() ? 1 : std::max(1, *std::max_element(v.begin(), v.end()));
  };
  s.seqlen_q = longest(seqlens_q);
  s.seqlen_k = longest(seqlens_k);
  s.seqlens_q = std::move(seqlens_q);
  s.seqlens_k = std::move(seqlens_k);
  return s;
}

double forward_flops(const Spec& spec, const Shape& shape) {
  return 2.0 * problem_of(spec, shape).visible_pairs() * (spec.head_dim_qk + spec.head_dim_v);
}

RunResult run_attention(Runtime& runtime, const Spec& spec, const Shape& given_shape,
                        const RunOptions& options, const UserInputs* inputs) {
  if (given_shape.batch < 1 || given_shape.heads_q < 1 || given_shape.heads_kv < 1 ||
      given_shape.seqlen_q < 1 || given_shape.seqlen_k < 1 ||
      given_shape.heads_q % given_shape.heads_kv != 0)
    throw Error(ErrorKind::Shape,
                fmt::format("shape batch {} heads_q {} heads_kv {} seqlen_q {} seqlen_k {}: all "
                            "must be >= 1 and heads_q a multiple of heads_kv",
                            given_shape.batch, given_shape.heads_q, given_shape.heads_kv,
                            given_shape.seqlen_q, given_shape.seqlen_k));
  check_mask_shape(spec, given_shape);
  if (inputs) check_user_inputs(spec, given_shape, *inputs);
  const Placement at = place(spec, given_shape);
  const DType dtype = spec.dtype;
  const int dqk = spec.head_dim_qk, dv = spec.head_dim_v;
  RunResult result;

  // Inputs: Q, K, V written into one host image; padding stays poisoned (NaN) so a kernel
  // that reads it produces NaN in O.
  std::vector<uint16_t> image(at.input_elements, kPoison16);
  RandomInputs random(options.seed, options.distribution);
  result.seed = inputs ? 0 : random.seed();
  const Shape shape = with_layout(spec, given_shape, random.seed());
  const bool varlen = is_varlen(shape);
  const auto fill = [&](int64_t offset, int seqlen, int heads, int dim, const TensorStrides& s,
                        const std::vector<float>* user) {
    size_t n = 0;
    for_each_element(batches(shape), seqlen, heads, dim, s, [&](int64_t e) {
      image[offset + e] = encode(dtype, user ? (*user)[n++] : random.next(dtype));
    });
  };
  const int nq = q_rows(shape), nk = k_rows(shape);
  fill(at.q_offset, nq, shape.heads_q, dqk, at.q, inputs ? &inputs->q : nullptr);
  fill(at.k_offset, nk, shape.heads_kv, dqk, at.k, inputs ? &inputs->k : nullptr);
  fill(at.v_offset, nk, shape.heads_kv, dv, at.v, inputs ? &inputs->v : nullptr);

  rt::Driver& driver = rt::Driver::get();
  rt::DeviceBuffer input(image.size() * sizeof(uint16_t));
  driver.copy_to_device(input.ptr(), image.data(), input.size());
  const int64_t o_total = at.o_elements + kGuardElements;
  // [batch, heads_q, seqlen_q], or [heads_q, total_q] for varlen: batches x heads x rows.
  const int64_t lse_count = int64_t{batches(shape)} * shape.heads_q * nq;
  const int64_t lse_total = lse_count + kGuardElements;
  rt::DeviceBuffer o(o_total * sizeof(uint16_t));
  rt::DeviceBuffer lse(lse_total * sizeof(float));
  // 0xFF bytes: NaN in fp16, bf16 and fp32 alike.
  driver.memset_u8(o.ptr(), 0xFF, o.size());
  driver.memset_u8(lse.ptr(), 0xFF, lse.size());

  ForwardArgs args;
  const auto element = [](const rt::DeviceBuffer& buffer, int64_t offset) {
    return reinterpret_cast<void*>(buffer.ptr() + offset * sizeof(uint16_t));
  };
  args.q = element(input, at.q_offset);
  args.k = element(input, at.k_offset);
  args.v = element(input, at.v_offset);
  args.o = o.get();
  args.lse = reinterpret_cast<float*>(lse.get());
  args.batch = shape.batch;
  args.heads_q = shape.heads_q;
  args.heads_kv = shape.heads_kv;
  args.seqlen_q = shape.seqlen_q;
  args.seqlen_k = shape.seqlen_k;
  args.q_stride = at.q;
  args.k_stride = at.k;
  args.v_stride = at.v;
  args.o_stride = at.o;

  // The int32 side inputs: varlen prefix sums, the block-sparse layout.
  std::vector<int32_t> side;
  std::vector<int32_t> cu_q = prefix_sums(shape.seqlens_q), cu_k = prefix_sums(shape.seqlens_k);
  BlockLayout layout;
  if (spec.mask == MaskKind::BlockSparse)
    layout = block_layout_from_dense(shape.block_visible, shape.layout_batch, shape.layout_heads,
                                     (shape.seqlen_q + spec.block_q - 1) / spec.block_q,
                                     (shape.seqlen_k + spec.block_k - 1) / spec.block_k);
  const size_t cu_k_at = cu_q.size(), counts_at = cu_k_at + cu_k.size();
  const size_t indices_at = counts_at + layout.counts.size();
  side.insert(side.end(), cu_q.begin(), cu_q.end());
  side.insert(side.end(), cu_k.begin(), cu_k.end());
  side.insert(side.end(), layout.counts.begin(), layout.counts.end());
  side.insert(side.end(), layout.indices.begin(), layout.indices.end());
  rt::DeviceBuffer side_buffer(side.size() * sizeof(int32_t));
  driver.copy_to_device(side_buffer.ptr(), side.data(), side_buffer.size());
  const auto side_ptr = [&](size_t offset) {
    return reinterpret_cast<const int32_t*>(side_buffer.ptr() + offset * sizeof(int32_t));
  };
  if (varlen) {
    args.cu_seqlens_q = side_ptr(0);
    args.cu_seqlens_k = side_ptr(cu_k_at);
    args.total_q = cu_q.back();  // what lets the sm90 kernel map the packed tensors
    args.total_k = cu_k.back();
  }
  if (spec.mask == MaskKind::BlockSparse) {
    args.block_counts = side_ptr(counts_at);
    args.block_indices = side_ptr(indices_at);
    args.layout_batch = layout.batch;
    args.layout_heads = layout.heads;
    args.layout_q_blocks = layout.q_blocks;
    args.layout_max_blocks = layout.max_blocks;
  }

  std::shared_ptr<Kernel> kernel = runtime.kernel(spec);
  kernel->forward(args, nullptr);
  driver.synchronize();

  std::vector<uint16_t> o_image(o_total);
  std::vector<uint32_t> lse_bits(lse_total);
  driver.copy_to_host(o_image.data(), o.ptr(), o.size());
  driver.copy_to_host(lse_bits.data(), lse.ptr(), lse.size());

  // O in logical order; every element outside the logical tensor must still be poison.
  std::vector<float> o_got;
  o_got.reserve(static_cast<size_t>(batches(shape)) * nq * shape.heads_q * dv);
  std::vector<bool> logical(o_total, false);
  for_each_element(batches(shape), nq, shape.heads_q, dv, at.o, [&](int64_t e) {
    o_got.push_back(decode(dtype, o_image[e]));
    logical[e] = true;
  });
  for (int64_t e = 0; e < o_total; ++e)
    if (!logical[e] && o_image[e] != kPoison16) ++result.o_outside_writes;
  std::vector<float> lse_got(lse_count);
  std::memcpy(lse_got.data(), lse_bits.data(), lse_count * sizeof(float));
  for (int64_t e = lse_count; e < lse_total; ++e)
    if (lse_bits[e] != 0xFFFFFFFFu) ++result.o_outside_writes;

  // The reference reads the same image (decoded) through the same strides.
  std::vector<float> decoded(image.size());
  for (size_t e = 0; e < image.size(); ++e) decoded[e] = decode(dtype, image[e]);
  const ReferenceOutput want =
      reference_forward(problem_of(spec, shape), HostView{decoded.data() + at.q_offset, at.q},
                        HostView{decoded.data() + at.k_offset, at.k},
                        HostView{decoded.data() + at.v_offset, at.v});
  const Tolerances tol = make_tolerances(dtype);
  result.o = compare(o_got, want.o, tol.o);
  result.lse = compare(lse_got, want.lse, tol.lse);
  result.failure = describe_failure(result, tol);
  result.passed = result.failure.empty();

  // Kernel exposes no "variant launched last"; the variant compiled last is the one this
  // call needed unless an earlier call of the same kernel compiled it already.
  const std::vector<CompileReport> reports = kernel->reports();
  if (!reports.empty()) result.kernel = reports.back().kernel_name;

  if (options.iters > 0) {
    for (int n = 0; n < options.warmup; ++n) kernel->forward(args, nullptr);
    const rt::Event start, stop;
    std::vector<float> times;
    for (int n = 0; n < options.iters; ++n) {
      driver.event_record(start.get(), nullptr);
      kernel->forward(args, nullptr);
      driver.event_record(stop.get(), nullptr);
      times.push_back(driver.event_elapsed_ms(start.get(), stop.get()));
    }
    result.time_ms = median(times);
    result.tflops = forward_flops(spec, shape) / (result.time_ms * 1e-3) / 1e12;
  }
  if (options.keep_outputs) {
    result.o_values = std::move(o_got);
    result.lse_values = std::move(lse_got);
  }
  return result;
}

}  // namespace flashjit::verify
