#include "verify/decode_run.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/driver.h"
#include "verify/device_run.h"
#include "verify/reference.h"

namespace flashjit::verify {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw Error(ErrorKind::Shape, "decode run: " + message);
}

void check_decode_shape(const DecodeShape& s) {
  require(s.batch >= 1 && s.heads_q >= 1 && s.heads_kv >= 1 && s.seqlen_q >= 1 && s.seqlen_k >= 1,
          "batch, heads, seqlen_q and seqlen_k must be >= 1");
  require(s.heads_q % s.heads_kv == 0, "heads_q must be a multiple of heads_kv");
  require(s.cache_seqlens.empty() || static_cast<int>(s.cache_seqlens.size()) == s.batch,
          fmt::format("{} cache lengths for batch {}", s.cache_seqlens.size(), s.batch));
  for (int len : s.cache_seqlens)
    require(len >= 0 && len <= s.seqlen_k,
            fmt::format("cache length {} is outside 0..seqlen_k {}", len, s.seqlen_k));
  require(s.page_size >= 0, "page_size must be >= 0");
}

int cache_length(const DecodeShape& s, int b) {
  return s.cache_seqlens.empty() ? s.seqlen_k : s.cache_seqlens[b];
}

constexpr uint16_t kPoison = 0xFFFF;  // NaN in fp16 and bf16

// A device copy of int32 values.
rt::DeviceBuffer device_ints(const std::vector<int32_t>& values) {
  rt::DeviceBuffer buffer(std::max<size_t>(values.size(), 1) * sizeof(int32_t));
  if (!values.empty())
    rt::Driver::get().copy_to_device(buffer.ptr(), values.data(), values.size() * sizeof(int32_t));
  return buffer;
}

// The dense cache [batch, seqlen_k, heads_kv, dim] as a paged one: pages of page_size rows in
// an order shuffled by `seed`, two spare pages that no sequence lists, every row past a
// sequence's length left poison.
struct PagedCache {
  std::vector<uint16_t> image;
  std::vector<int32_t> block_table;
  int max_pages = 0, num_pages = 0;
};
PagedCache page_cache(const std::vector<uint16_t>& dense, const DecodeShape& s, int dim,
                      uint64_t seed) {
  PagedCache paged;
  paged.max_pages = (s.seqlen_k + s.page_size - 1) / s.page_size;
  paged.num_pages = s.batch * paged.max_pages + 2;
  std::vector<int32_t> order(paged.num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed ^ 0x9e3779b97f4a7c15ull));
  paged.block_table.assign(order.begin(), order.begin() + s.batch * paged.max_pages);
  const size_t row = static_cast<size_t>(s.heads_kv) * dim;
  paged.image.assign(static_cast<size_t>(paged.num_pages) * s.page_size * row, kPoison);
  for (int b = 0; b < s.batch; ++b)
    for (int j = 0; j < cache_length(s, b); ++j) {
      const int page = paged.block_table[b * paged.max_pages + j / s.page_size];
      std::copy_n(dense.begin() + (static_cast<size_t>(b) * s.seqlen_k + j) * row, row,
                  paged.image.begin() + (static_cast<size_t>(page) * s.page_size + j % s.page_size) * row);
    }
  return paged;
}

std::vector<uint16_t> random_image(DType dtype, size_t elements, RandomInputs& random) {
  std::vector<uint16_t> image(elements);
  random.fill(dtype, image);
  return image;
}

}  // namespace

std::string describe(const DecodeShape& s) {
  std::string cache = s.cache_seqlens.empty() ? fmt::format("{}", s.seqlen_k)
                                              : fmt::format("{}", fmt::join(s.cache_seqlens, ","));
  if (cache.size() > 40) cache = cache.substr(0, 37) + "...";
  return fmt::format("b={} hq={} hkv={} sq={} cache=[{}]{}", s.batch, s.heads_q, s.heads_kv,
                     s.seqlen_q, cache,
                     s.page_size > 0 ? fmt::format(" paged {}", s.page_size) : " dense");
}

double decode_cache_bytes(const Spec& spec, const DecodeShape& s) {
  double keys = 0;
  for (int b = 0; b < s.batch; ++b) keys += cache_length(s, b);
  return keys * s.heads_kv * (spec.head_dim_qk + spec.head_dim_v) * 2.0;
}

RunResult run_decode(Runtime& runtime, const Spec& spec, const DecodeShape& s,
                     const RunOptions& options) {
  check_decode_shape(s);
  const DType dtype = spec.dtype;
  const int dqk = spec.head_dim_qk, dv = spec.head_dim_v;
  RandomInputs random(options.seed, options.distribution);
  RunResult result;
  result.seed = random.seed();

  const size_t q_elems = static_cast<size_t>(s.batch) * s.seqlen_q * s.heads_q * dqk;
  const size_t k_elems = static_cast<size_t>(s.batch) * s.seqlen_k * s.heads_kv * dqk;
  const size_t v_elems = static_cast<size_t>(s.batch) * s.seqlen_k * s.heads_kv * dv;
  const std::vector<uint16_t> q_image = random_image(dtype, q_elems, random);
  std::vector<uint16_t> k_image = random_image(dtype, k_elems, random);
  std::vector<uint16_t> v_image = random_image(dtype, v_elems, random);
  // Rows past each sequence's length are never to be read: poison.
  for (int b = 0; b < s.batch; ++b) {
    const size_t begin = static_cast<size_t>(b) * s.seqlen_k + cache_length(s, b);
    const size_t end = static_cast<size_t>(b + 1) * s.seqlen_k;
    std::fill(k_image.begin() + begin * s.heads_kv * dqk, k_image.begin() + end * s.heads_kv * dqk,
              kPoison);
    std::fill(v_image.begin() + begin * s.heads_kv * dv, v_image.begin() + end * s.heads_kv * dv,
              kPoison);
  }

  ForwardArgs args = ForwardArgs::contiguous(spec, s.batch, s.heads_q, s.heads_kv, s.seqlen_q,
                                             s.seqlen_k);
  PagedCache paged_k, paged_v;
  if (s.page_size > 0) {
    paged_k = page_cache(k_image, s, dqk, result.seed);
    paged_v = page_cache(v_image, s, dv, result.seed);  // the same order: one table
    args.k_stride = {static_cast<int64_t>(s.page_size) * s.heads_kv * dqk,
                     static_cast<int64_t>(s.heads_kv) * dqk, dqk};
    args.v_stride = {static_cast<int64_t>(s.page_size) * s.heads_kv * dv,
                     static_cast<int64_t>(s.heads_kv) * dv, dv};
    args.page_size = s.page_size;
    args.max_pages = paged_k.max_pages;
    args.num_pages = paged_k.num_pages;
  }
  const std::vector<uint16_t>& k_upload = s.page_size > 0 ? paged_k.image : k_image;
  const std::vector<uint16_t>& v_upload = s.page_size > 0 ? paged_v.image : v_image;
  rt::Driver& driver = rt::Driver::get();
  const auto upload = [&](const std::vector<uint16_t>& image) {
    rt::DeviceBuffer buffer(image.size() * sizeof(uint16_t));
    driver.copy_to_device(buffer.ptr(), image.data(), buffer.size());
    return buffer;
  };
  const rt::DeviceBuffer q = upload(q_image), k = upload(k_upload), v = upload(v_upload);
  const rt::DeviceBuffer table = device_ints(paged_k.block_table);
  const rt::DeviceBuffer lengths =
      device_ints(std::vector<int32_t>(s.cache_seqlens.begin(), s.cache_seqlens.end()));
  const int64_t o_elems = static_cast<int64_t>(s.batch) * s.seqlen_q * s.heads_q * dv;
  const int64_t lse_count = static_cast<int64_t>(s.batch) * s.heads_q * s.seqlen_q;
  const rt::DeviceBuffer o = poisoned_buffer(o_elems, sizeof(uint16_t));
  const rt::DeviceBuffer lse = poisoned_buffer(lse_count, sizeof(float));
  args.q = q.get();
  args.k = k.get();
  args.v = v.get();
  args.o = o.get();
  args.lse = reinterpret_cast<float*>(lse.get());
  if (s.page_size > 0) args.block_table = reinterpret_cast<const int32_t*>(table.get());
  if (!s.cache_seqlens.empty()) args.cache_seqlens = reinterpret_cast<const int32_t*>(lengths.get());

  std::shared_ptr<Kernel> kernel = runtime.kernel(spec);
  kernel->forward(args, nullptr);
  driver.synchronize();

  OutputImage o_image(o);
  std::vector<float> o_got = o_image.take(dtype, 0, s.batch, s.seqlen_q, s.heads_q, dv, args.o_stride);
  result.o_outside_writes = o_image.outside_writes();
  std::vector<uint32_t> lse_bits(lse_count + kGuardElements);
  driver.copy_to_host(lse_bits.data(), lse.ptr(), lse.size());
  std::vector<float> lse_got(lse_count);
  std::memcpy(lse_got.data(), lse_bits.data(), lse_count * sizeof(float));
  for (size_t e = lse_count; e < lse_bits.size(); ++e)
    if (lse_bits[e] != 0xFFFFFFFFu) ++result.o_outside_writes;

  // The reference: each sequence alone, on its own keys of the dense images.
  const std::vector<float> qf = decode_image(dtype, q_image);
  const std::vector<float> kf = decode_image(dtype, k_image);
  const std::vector<float> vf = decode_image(dtype, v_image);
  std::vector<double> o_want(o_elems), lse_want(lse_count);
  for (int b = 0; b < s.batch; ++b) {
    AttentionProblem p;
    p.heads_q = s.heads_q;
    p.heads_kv = s.heads_kv;
    p.seqlen_q = s.seqlen_q;
    p.seqlen_k = cache_length(s, b);
    p.head_dim_qk = dqk;
    p.head_dim_v = dv;
    p.causal = spec.causal;
    p.window = spec.mask == MaskKind::SlidingWindow;
    p.window_left = spec.window_left;
    p.window_right = spec.window_right;
    const TensorStrides q_st{0, static_cast<int64_t>(s.heads_q) * dqk, dqk};
    const TensorStrides k_st{0, static_cast<int64_t>(s.heads_kv) * dqk, dqk};
    const TensorStrides v_st{0, static_cast<int64_t>(s.heads_kv) * dv, dv};
    const ReferenceOutput want = reference_forward(
        p, HostView{qf.data() + static_cast<size_t>(b) * s.seqlen_q * s.heads_q * dqk, q_st},
        HostView{kf.data() + static_cast<size_t>(b) * s.seqlen_k * s.heads_kv * dqk, k_st},
        HostView{vf.data() + static_cast<size_t>(b) * s.seqlen_k * s.heads_kv * dv, v_st});
    std::copy(want.o.begin(), want.o.end(),
              o_want.begin() + static_cast<size_t>(b) * s.seqlen_q * s.heads_q * dv);
    std::copy(want.lse.begin(), want.lse.end(),
              lse_want.begin() + static_cast<size_t>(b) * s.heads_q * s.seqlen_q);
  }
  const Tolerances tol = tolerances_for(dtype);
  result.o = compare(o_got, o_want, tol.o);
  result.lse = compare(lse_got, lse_want, tol.lse);
  result.failure = describe_failure(result, tol);
  result.passed = result.failure.empty();
  for (const CompileReport& report : kernel->reports())
    if (report.kernel_name.find("combine") == std::string::npos) result.kernel = report.kernel_name;
  result.time_ms = median_time_ms(options, [&] { kernel->forward(args, nullptr); });
  if (options.iters > 0)
    result.tflops = decode_cache_bytes(spec, s) / (result.time_ms * 1e-3) / 1e12;
  return result;
}

RunResult run_merge(Runtime& runtime, const Spec& spec, const DecodeShape& s, int split_key,
                    const RunOptions& options) {
  check_decode_shape(s);
  require(s.cache_seqlens.empty() && s.page_size == 0, "the merge run takes a dense cache");
  require(!spec.causal && spec.mask == MaskKind::None, "the merge run takes an unmasked spec");
  require(split_key >= 1 && split_key < s.seqlen_k, "split_key must be inside 1..seqlen_k-1");
  const DType dtype = spec.dtype;
  const int dqk = spec.head_dim_qk, dv = spec.head_dim_v;
  RandomInputs random(options.seed, options.distribution);
  RunResult result;
  result.seed = random.seed();
  const std::vector<uint16_t> q_image = random_image(
      dtype, static_cast<size_t>(s.batch) * s.seqlen_q * s.heads_q * dqk, random);
  const std::vector<uint16_t> k_image = random_image(
      dtype, static_cast<size_t>(s.batch) * s.seqlen_k * s.heads_kv * dqk, random);
  const std::vector<uint16_t> v_image = random_image(
      dtype, static_cast<size_t>(s.batch) * s.seqlen_k * s.heads_kv * dv, random);
  rt::Driver& driver = rt::Driver::get();
  const auto upload = [&](const std::vector<uint16_t>& image) {
    rt::DeviceBuffer buffer(image.size() * sizeof(uint16_t));
    driver.copy_to_device(buffer.ptr(), image.data(), buffer.size());
    return buffer;
  };
  const rt::DeviceBuffer q = upload(q_image), k = upload(k_image), v = upload(v_image);
  const int64_t o_elems = static_cast<int64_t>(s.batch) * s.seqlen_q * s.heads_q * dv;
  const int64_t lse_count = static_cast<int64_t>(s.batch) * s.heads_q * s.seqlen_q;
  const rt::DeviceBuffer o_a = poisoned_buffer(o_elems, sizeof(uint16_t));
  const rt::DeviceBuffer o_b = poisoned_buffer(o_elems, sizeof(uint16_t));
  const rt::DeviceBuffer lse_a = poisoned_buffer(lse_count, sizeof(float));
  const rt::DeviceBuffer lse_b = poisoned_buffer(lse_count, sizeof(float));
  std::shared_ptr<Kernel> kernel = runtime.kernel(spec);
  // Each half of the keys: the same tensors, K and V offset by split_key rows.
  for (int half = 0; half < 2; ++half) {
    const int first = half == 0 ? 0 : split_key;
    ForwardArgs args = ForwardArgs::contiguous(spec, s.batch, s.heads_q, s.heads_kv, s.seqlen_q,
                                               half == 0 ? split_key : s.seqlen_k - split_key);
    args.k_stride.batch = static_cast<int64_t>(s.seqlen_k) * s.heads_kv * dqk;
    args.v_stride.batch = static_cast<int64_t>(s.seqlen_k) * s.heads_kv * dv;
    args.q = q.get();
    args.k = static_cast<const uint16_t*>(k.get()) + first * args.k_stride.seq;
    args.v = static_cast<const uint16_t*>(v.get()) + first * args.v_stride.seq;
    args.o = (half == 0 ? o_a : o_b).get();
    args.lse = reinterpret_cast<float*>((half == 0 ? lse_a : lse_b).get());
    kernel->forward(args, nullptr);
  }
  const ForwardArgs shape_args =
      ForwardArgs::contiguous(spec, s.batch, s.heads_q, s.heads_kv, s.seqlen_q, s.seqlen_k);
  MergeArgs merge;
  merge.o_a = merge.o = o_a.get();
  merge.lse_a = merge.lse = reinterpret_cast<float*>(lse_a.get());
  merge.o_b = o_b.get();
  merge.lse_b = reinterpret_cast<const float*>(lse_b.get());
  merge.batch = s.batch;
  merge.heads = s.heads_q;
  merge.seqlen = s.seqlen_q;
  merge.o_a_stride = merge.o_b_stride = merge.o_stride = shape_args.o_stride;
  kernel->merge(merge, nullptr);
  driver.synchronize();

  OutputImage o_image(o_a);
  std::vector<float> o_got =
      o_image.take(dtype, 0, s.batch, s.seqlen_q, s.heads_q, dv, shape_args.o_stride);
  result.o_outside_writes = o_image.outside_writes();
  std::vector<float> lse_got(lse_count);
  driver.copy_to_host(lse_got.data(), lse_a.ptr(), lse_count * sizeof(float));
  AttentionProblem p;
  p.batch = s.batch;
  p.heads_q = s.heads_q;
  p.heads_kv = s.heads_kv;
  p.seqlen_q = s.seqlen_q;
  p.seqlen_k = s.seqlen_k;
  p.head_dim_qk = dqk;
  p.head_dim_v = dv;
  const std::vector<float> qf = decode_image(dtype, q_image);
  const std::vector<float> kf = decode_image(dtype, k_image);
  const std::vector<float> vf = decode_image(dtype, v_image);
  const ReferenceOutput want = reference_forward(p, HostView{qf.data(), shape_args.q_stride},
                                                 HostView{kf.data(), shape_args.k_stride},
                                                 HostView{vf.data(), shape_args.v_stride});
  const Tolerances tol = tolerances_for(dtype);
  result.o = compare(o_got, want.o, tol.o);
  result.lse = compare(lse_got, want.lse, tol.lse);
  result.failure = describe_failure(result, tol);
  result.passed = result.failure.empty();
  for (const CompileReport& report : kernel->reports())
    if (report.kernel_name.rfind("fa_merge", 0) == 0) result.kernel = report.kernel_name;
  return result;
}

}  // namespace flashjit::verify
