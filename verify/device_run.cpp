#include "verify/device_run.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "verify/half.h"

namespace flashjit::verify {

namespace {

// Q, K and V share one allocation; each starts on a 128-byte boundary unless packed.
constexpr int64_t kTensorAlignElements = 64;

int64_t align_up(int64_t value, int64_t to) { return (value + to - 1) / to * to; }

TensorStrides strides_for(int seqlen, int heads, int64_t head_stride) {
  TensorStrides s;
  s.head = head_stride;
  s.seq = heads * head_stride;
  s.batch = seqlen * s.seq;
  return s;
}

int sum(const std::vector<int>& values) {
  int total = 0;
  for (int x : values) total += x;
  return total;
}

std::vector<int> prefix_sums(const std::vector<int>& lengths) {
  std::vector<int> cu{0};
  for (int n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

double median(std::vector<float> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
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
  if (shape.block_visible.empty()) return;  // drawn at random by the run
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

}  // namespace

bool is_varlen(const Shape& shape) { return !shape.seqlens_q.empty(); }
int batches(const Shape& s) { return is_varlen(s) ? 1 : s.batch; }
int q_rows(const Shape& s) { return is_varlen(s) ? sum(s.seqlens_q) : s.seqlen_q; }
int k_rows(const Shape& s) { return is_varlen(s) ? sum(s.seqlens_k) : s.seqlen_k; }

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

void check_shape(const Spec& spec, const Shape& shape) {
  if (shape.batch < 1 || shape.heads_q < 1 || shape.heads_kv < 1 || shape.seqlen_q < 1 ||
      shape.seqlen_k < 1 || shape.heads_q % shape.heads_kv != 0)
    throw Error(ErrorKind::Shape,
                fmt::format("shape batch {} heads_q {} heads_kv {} seqlen_q {} seqlen_k {}: all "
                            "must be >= 1 and heads_q a multiple of heads_kv",
                            shape.batch, shape.heads_q, shape.heads_kv, shape.seqlen_q,
                            shape.seqlen_k));
  check_mask_shape(spec, shape);
  place(spec, shape);
}

void check_user_inputs(const Spec& spec, const Shape& shape, const UserInputs& in,
                       bool with_d_o) {
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
  if (with_d_o) expect("d_o", in.d_o.size(), nq * shape.heads_q * spec.head_dim_v);
}

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

void fill_tensor(std::vector<uint16_t>& image, DType dtype, int64_t offset, int batch, int rows,
                 int heads, int dim, const TensorStrides& strides, const std::vector<float>* user,
                 RandomInputs& random) {
  size_t n = 0;
  for_each_element(batch, rows, heads, dim, strides, [&](int64_t e) {
    image[offset + e] = encode(dtype, user ? (*user)[n++] : random.next(dtype));
  });
}

std::vector<float> decode_image(DType dtype, const std::vector<uint16_t>& image) {
  std::vector<float> decoded(image.size());
  for (size_t e = 0; e < image.size(); ++e) decoded[e] = decode(dtype, image[e]);
  return decoded;
}

DeviceInputs::DeviceInputs(const Spec& spec, const Shape& shape, const Placement& at,
                           RandomInputs& random, const UserInputs* user)
    : image(at.input_elements, kPoison16) {
  const DType dtype = spec.dtype;
  const int n = batches(shape), nq = q_rows(shape), nk = k_rows(shape);
  fill_tensor(image, dtype, at.q_offset, n, nq, shape.heads_q, spec.head_dim_qk, at.q,
              user ? &user->q : nullptr, random);
  fill_tensor(image, dtype, at.k_offset, n, nk, shape.heads_kv, spec.head_dim_qk, at.k,
              user ? &user->k : nullptr, random);
  fill_tensor(image, dtype, at.v_offset, n, nk, shape.heads_kv, spec.head_dim_v, at.v,
              user ? &user->v : nullptr, random);

  rt::Driver& driver = rt::Driver::get();
  input = rt::DeviceBuffer(image.size() * sizeof(uint16_t));
  driver.copy_to_device(input.ptr(), image.data(), input.size());
  const auto element = [this](int64_t offset) {
    return reinterpret_cast<void*>(input.ptr() + offset * sizeof(uint16_t));
  };
  args.q = element(at.q_offset);
  args.k = element(at.k_offset);
  args.v = element(at.v_offset);
  args.batch = shape.batch;
  args.heads_q = shape.heads_q;
  args.heads_kv = shape.heads_kv;
  args.seqlen_q = shape.seqlen_q;
  args.seqlen_k = shape.seqlen_k;
  args.q_stride = at.q;
  args.k_stride = at.k;
  args.v_stride = at.v;
  args.o_stride = at.o;

  std::vector<int32_t> values;
  const std::vector<int32_t> cu_q = prefix_sums(shape.seqlens_q);
  const std::vector<int32_t> cu_k = prefix_sums(shape.seqlens_k);
  BlockLayout layout;
  if (spec.mask == MaskKind::BlockSparse)
    layout = block_layout_from_dense(shape.block_visible, shape.layout_batch, shape.layout_heads,
                                     (shape.seqlen_q + spec.block_q - 1) / spec.block_q,
                                     (shape.seqlen_k + spec.block_k - 1) / spec.block_k);
  const size_t cu_k_at = cu_q.size(), counts_at = cu_k_at + cu_k.size();
  const size_t indices_at = counts_at + layout.counts.size();
  values.insert(values.end(), cu_q.begin(), cu_q.end());
  values.insert(values.end(), cu_k.begin(), cu_k.end());
  values.insert(values.end(), layout.counts.begin(), layout.counts.end());
  values.insert(values.end(), layout.indices.begin(), layout.indices.end());
  side = rt::DeviceBuffer(values.size() * sizeof(int32_t));
  driver.copy_to_device(side.ptr(), values.data(), side.size());
  const auto side_ptr = [this](size_t offset) {
    return reinterpret_cast<const int32_t*>(side.ptr() + offset * sizeof(int32_t));
  };
  if (is_varlen(shape)) {
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
}

rt::DeviceBuffer poisoned_buffer(int64_t elements, size_t element_bytes) {
  rt::DeviceBuffer buffer((elements + kGuardElements) * element_bytes);
  rt::Driver::get().memset_u8(buffer.ptr(), 0xFF, buffer.size());
  return buffer;
}

OutputImage::OutputImage(const rt::DeviceBuffer& buffer)
    : bits_(buffer.size() / sizeof(uint16_t)), logical_(bits_.size(), false) {
  rt::Driver::get().copy_to_host(bits_.data(), buffer.ptr(), buffer.size());
}

std::vector<float> OutputImage::take(DType dtype, int64_t offset, int batch, int rows, int heads,
                                     int dim, const TensorStrides& strides) {
  std::vector<float> values;
  values.reserve(static_cast<size_t>(batch) * rows * heads * dim);
  for_each_element(batch, rows, heads, dim, strides, [&](int64_t e) {
    values.push_back(decode(dtype, bits_[offset + e]));
    logical_[offset + e] = true;
  });
  return values;
}

int64_t OutputImage::outside_writes() const {
  int64_t count = 0;
  for (size_t e = 0; e < bits_.size(); ++e)
    if (!logical_[e] && bits_[e] != kPoison16) ++count;
  return count;
}

double median_time_ms(const RunOptions& options, const std::function<void()>& launch) {
  if (options.iters <= 0) return 0;
  rt::Driver& driver = rt::Driver::get();
  for (int n = 0; n < options.warmup; ++n) launch();
  const rt::Event start, stop;
  std::vector<float> times;
  for (int n = 0; n < options.iters; ++n) {
    driver.event_record(start.get(), nullptr);
    launch();
    driver.event_record(stop.get(), nullptr);
    times.push_back(driver.event_elapsed_ms(start.get(), stop.get()));
  }
  return median(times);
}

}  // namespace flashjit::verify
