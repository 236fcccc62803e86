#include "python/src/tensor_args.h"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace nb = nanobind;

namespace flashjit::py {
namespace {

[[noreturn]] void fail(const char* operation, const std::string& message) {
  throw Error(ErrorKind::Shape, fmt::format("{}: {}", operation, message));
}

std::string dtype_name(nb::dlpack::dtype t) {
  switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
    case nb::dlpack::dtype_code::Float: return fmt::format("float{}", t.bits);
    case nb::dlpack::dtype_code::Bfloat: return fmt::format("bfloat{}", t.bits);
    case nb::dlpack::dtype_code::Int: return fmt::format("int{}", t.bits);
    case nb::dlpack::dtype_code::UInt: return fmt::format("uint{}", t.bits);
    default: return fmt::format("DLPack dtype code {} of {} bits", t.code, t.bits);
  }
}

constexpr nb::dlpack::dtype kFloat32 = nb::dtype<float>();
constexpr nb::dlpack::dtype kInt32 = nb::dtype<int32_t>();
constexpr nb::dlpack::dtype kFloat16{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
constexpr nb::dlpack::dtype kBfloat16{static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};

nb::dlpack::dtype element_dtype(const Spec& spec) {
  return spec.dtype == DType::F16 ? kFloat16 : kBfloat16;
}

// Every tensor of a call is CUDA memory of one GPU, whose ordinal goes to `device`.
void require_cuda(const char* operation, const TensorView& t, int& device) {
  if (t.device_type != nb::device::cuda::value) {
    const bool cpu = t.device_type == nb::device::cpu::value;
    fail(operation,
         fmt::format("{} is {} (DLPack device type {}): flashjit's kernels run on CUDA GPUs; "
                     "pass a CUDA tensor (e.g. torch's x.cuda(), cupy.asarray(x))",
                     t.name, cpu ? "in CPU memory (a NumPy array or a CPU tensor)" : "not CUDA memory",
                     t.device_type));
  }
  if (device < 0) {
    device = t.device_id;
  } else if (t.device_id != device) {
    fail(operation, fmt::format("{} is on cuda:{} but the other tensors are on cuda:{}", t.name,
                                t.device_id, device));
  }
}

void require_dtype(const char* operation, const TensorView& t, nb::dlpack::dtype want,
                   std::string_view why) {
  if (t.dtype != want)
    fail(operation, fmt::format("{} is {} but must be {} ({})", t.name, dtype_name(t.dtype),
                                dtype_name(want), why));
}

// `want` holds -1 where any extent is accepted; the tensor's extents are returned.
std::span<const int64_t> require_shape(const char* operation, const TensorView& t,
                                       std::initializer_list<int64_t> want, const char* layout) {
  bool ok = t.shape.size() == want.size();
  for (size_t d = 0; ok && d < want.size(); ++d) {
    const int64_t w = want.begin()[d];
    ok = w < 0 || w == t.shape[d];
  }
  if (!ok) {
    std::vector<std::string> shown;
    for (int64_t w : want) shown.push_back(w < 0 ? "*" : std::to_string(w));
    fail(operation, fmt::format("{} has shape [{}] but must be {} = [{}]", t.name,
                                fmt::join(t.shape, ", "), layout, fmt::join(shown, ", ")));
  }
  for (int64_t extent : t.shape)
    if (extent > INT_MAX) fail(operation, fmt::format("{}: extent {} exceeds 2^31 - 1", t.name, extent));
  return t.shape;
}

void require_unit_last_stride(const char* operation, const TensorView& t) {
  if (t.shape.back() > 1 && t.strides.back() != 1)
    fail(operation, fmt::format("{} has strides [{}]: its last (head dim) stride must be 1", t.name,
                                fmt::join(t.strides, ", ")));
}

void require_contiguous(const char* operation, const TensorView& t) {
  int64_t expected = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] > 1 && t.strides[d] != expected)
      fail(operation, fmt::format("{} has strides [{}] but must be contiguous (row-major)", t.name,
                                  fmt::join(t.strides, ", ")));
    expected *= t.shape[d];
  }
}

// {batch, seq, head} strides of a [B, S, H, D] tensor, or of a packed [T, H, D] one.
TensorStrides strides_of(const TensorView& t) {
  if (t.shape.size() == 3) return {0, t.strides[0], t.strides[1]};
  return {t.strides[0], t.strides[1], t.strides[2]};
}

// One tensor of the attention layout: on the call's GPU, in the spec's dtype (the reason is
// formatted only for the message: this runs for every tensor of every call).
void require_attention_tensor(const char* operation, const TensorView& t, const Spec& spec,
                              int& device) {
  require_cuda(operation, t, device);
  if (t.dtype != element_dtype(spec))
    require_dtype(operation, t, element_dtype(spec),
                  fmt::format("kernel {} has dtype {}", spec.name, to_string(spec.dtype)));
}

int as_int(int64_t value) { return static_cast<int>(value); }

// How each tensor's extents are named in messages.
struct Layout {
  const char *q, *k, *v, *o, *lse;
};

constexpr Layout kDense{"[batch, seqlen_q, heads_q, head_dim_qk]",
                        "[batch, seqlen_k, heads_kv, head_dim_qk]",
                        "[batch, seqlen_k, heads_kv, head_dim_v]",
                        "[batch, seqlen_q, heads_q, head_dim_v]", "[batch, heads_q, seqlen_q]"};
constexpr Layout kVarlen{"[total_q, heads_q, head_dim_qk]", "[total_k, heads_kv, head_dim_qk]",
                         "[total_k, heads_kv, head_dim_v]", "[total_q, heads_q, head_dim_v]",
                         "[heads_q, total_q]"};

// The int32 arrays of a block-sparse layout: contiguous, on the call's GPU, counts and
// indices agreeing on [layout_batch, layout_heads, layout_q_blocks].
void set_block_layout(const char* operation, ForwardArgs& args, const CallOptions& options,
                      int& device) {
  if (!options.block_counts && !options.block_indices) return;
  if (!options.block_counts || !options.block_indices)
    fail(operation, "block_counts and block_indices: give both or neither");
  const TensorView& counts = *options.block_counts;
  const TensorView& indices = *options.block_indices;
  for (const TensorView* t : {&counts, &indices}) {
    require_cuda(operation, *t, device);
    require_dtype(operation, *t, kInt32, "a block layout is int32");
    require_contiguous(operation, *t);
  }
  const auto c = require_shape(operation, counts, {-1, -1, -1},
                               "[layout_batch, layout_heads, layout_q_blocks]");
  require_shape(operation, indices, {c[0], c[1], c[2], -1},
                "[layout_batch, layout_heads, layout_q_blocks, layout_max_blocks]");
  args.block_counts = static_cast<const int32_t*>(counts.data);
  args.block_indices = static_cast<const int32_t*>(indices.data);
  args.layout_batch = as_int(c[0]);
  args.layout_heads = as_int(c[1]);
  args.layout_q_blocks = as_int(c[2]);
  args.layout_max_blocks = as_int(indices.shape[3]);
}

// The prefix sums of a varlen call: int32 [batch + 1] each, on the call's GPU.
int set_cu_seqlens(const char* operation, ForwardArgs& args, const CallOptions& options,
                   int& device) {
  const TensorView& cu_q = *options.cu_seqlens_q;
  const TensorView& cu_k = *options.cu_seqlens_k;
  for (const TensorView* t : {&cu_q, &cu_k}) {
    require_cuda(operation, *t, device);
    require_dtype(operation, *t, kInt32, "prefix sums are int32");
    require_contiguous(operation, *t);
  }
  const auto n = require_shape(operation, cu_q, {-1}, "[batch + 1]");
  require_shape(operation, cu_k, {n[0]}, "[batch + 1] as cu_seqlens_q");
  if (n[0] < 2) fail(operation, "cu_seqlens_q must hold at least 2 entries (one sequence)");
  if (options.max_seqlen_q < 1 || options.max_seqlen_k < 1)
    fail(operation, fmt::format("a varlen call (cu_seqlens) needs max_seqlen_q and max_seqlen_k, "
                                "the longest sequences' lengths (got {} and {})",
                                options.max_seqlen_q, options.max_seqlen_k));
  args.cu_seqlens_q = static_cast<const int32_t*>(cu_q.data);
  args.cu_seqlens_k = static_cast<const int32_t*>(cu_k.data);
  return as_int(n[0] - 1);
}

// A KV cache's lengths (int32 [batch]) and a paged cache's block table (int32 [batch,
// max_pages]; K and V are then [num_pages, page_size, heads_kv, dim]), on the call's GPU.
void set_kv_cache(const char* operation, ForwardArgs& args, const CallOptions& options,
                  const TensorView& k, int& device) {
  if (options.cache_seqlens) {
    const TensorView& lengths = *options.cache_seqlens;
    require_cuda(operation, lengths, device);
    require_dtype(operation, lengths, kInt32, "cache lengths are int32");
    require_contiguous(operation, lengths);
    require_shape(operation, lengths, {args.batch}, "[batch]");
    args.cache_seqlens = static_cast<const int32_t*>(lengths.data);
  }
  if (options.block_table) {
    const TensorView& table = *options.block_table;
    require_cuda(operation, table, device);
    require_dtype(operation, table, kInt32, "a block table is int32");
    require_contiguous(operation, table);
    const auto t = require_shape(operation, table, {args.batch, -1}, "[batch, max_pages]");
    args.block_table = static_cast<const int32_t*>(table.data);
    args.num_pages = as_int(k.shape[0]);
    args.page_size = as_int(k.shape[1]);
    args.max_pages = as_int(t[1]);
    // The longest sequence the table can hold: the cache lengths say how much of it is used.
    args.seqlen_k = as_int(t[1] * k.shape[1]);
  }
}

// Q, K, V, O (and LSE) of one call in the spec's layout: their extents agree with each other
// and with the spec's head dims. Fills the shape, strides and pointers of `args`.
void set_attention_tensors(const char* operation, ForwardArgs& args, const Spec& spec,
                           const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& o, const TensorView* lse, const CallOptions& options,
                           int& device) {
  const bool varlen = options.cu_seqlens_q || options.cu_seqlens_k;
  if (varlen && !(options.cu_seqlens_q && options.cu_seqlens_k))
    fail(operation, "cu_seqlens_q and cu_seqlens_k: give both or neither");
  const bool paged = options.block_table.has_value();
  if (varlen && (paged || options.cache_seqlens))
    fail(operation, "a KV cache (cache_seqlens, block_table) is not served with cu_seqlens");
  const Layout& layout = varlen ? kVarlen : kDense;
  for (const TensorView* t : {&q, &k, &v, &o})
    require_attention_tensor(operation, *t, spec, device);
  const int64_t dqk = spec.head_dim_qk, dv = spec.head_dim_v;
  if (varlen) {
    const auto qs = require_shape(operation, q, {-1, -1, dqk}, layout.q);
    const auto ks = require_shape(operation, k, {-1, -1, dqk}, layout.k);
    require_shape(operation, v, {ks[0], ks[1], dv}, layout.v);
    require_shape(operation, o, {qs[0], qs[1], dv}, layout.o);
    args.batch = set_cu_seqlens(operation, args, options, device);
    args.heads_q = as_int(qs[1]);
    args.heads_kv = as_int(ks[1]);
    args.seqlen_q = options.max_seqlen_q;
    args.seqlen_k = options.max_seqlen_k;
    args.total_q = as_int(qs[0]);
    args.total_k = as_int(ks[0]);
    if (lse) require_shape(operation, *lse, {qs[1], qs[0]}, layout.lse);
  } else {
    if (options.max_seqlen_q || options.max_seqlen_k)
      fail(operation, "max_seqlen_q / max_seqlen_k are for varlen calls (with cu_seqlens)");
    const auto qs = require_shape(operation, q, {-1, -1, -1, dqk}, layout.q);
    // A paged cache's first dimension is its pages, its second a page's rows.
    const auto ks = paged ? require_shape(operation, k, {-1, -1, -1, dqk},
                                          "[num_pages, page_size, heads_kv, head_dim_qk]")
                          : require_shape(operation, k, {qs[0], -1, -1, dqk}, layout.k);
    require_shape(operation, v, {ks[0], ks[1], ks[2], dv},
                  paged ? "[num_pages, page_size, heads_kv, head_dim_v] as k" : layout.v);
    require_shape(operation, o, {qs[0], qs[1], qs[2], dv}, layout.o);
    args.batch = as_int(qs[0]);
    args.seqlen_q = as_int(qs[1]);
    args.heads_q = as_int(qs[2]);
    args.seqlen_k = as_int(ks[1]);
    args.heads_kv = as_int(ks[2]);
    if (lse) require_shape(operation, *lse, {qs[0], qs[2], qs[1]}, layout.lse);
    set_kv_cache(operation, args, options, k, device);
  }
  for (const TensorView* t : {&q, &k, &v, &o}) require_unit_last_stride(operation, *t);
  if (lse) {
    require_cuda(operation, *lse, device);
    require_dtype(operation, *lse, kFloat32, "LSE is fp32");
    require_contiguous(operation, *lse);
    args.lse = static_cast<float*>(lse->data);
  }
  args.q = q.data;
  args.k = k.data;
  args.v = v.data;
  args.o = o.data;
  args.q_stride = strides_of(q);
  args.k_stride = strides_of(k);
  args.v_stride = strides_of(v);
  args.o_stride = strides_of(o);
  args.softmax_scale = options.softmax_scale;
  set_block_layout(operation, args, options, device);
}

// A gradient has the layout, dtype and extents of the tensor it is the gradient of.
TensorStrides gradient_strides(const char* operation, const TensorView& gradient,
                               const TensorView& of, const Spec& spec, int& device) {
  require_attention_tensor(operation, gradient, spec, device);
  if (!std::ranges::equal(gradient.shape, of.shape))
    fail(operation, fmt::format("{} has shape [{}] but must have {}'s shape [{}]", gradient.name,
                                fmt::join(gradient.shape, ", "), of.name, fmt::join(of.shape, ", ")));
  require_unit_last_stride(operation, gradient);
  return strides_of(gradient);
}

}  // namespace

ForwardArgs forward_args(const Spec& spec, const ForwardTensors& tensors,
                         const CallOptions& options, int& device) {
  ForwardArgs args;
  device = -1;
  set_attention_tensors("forward", args, spec, tensors.q, tensors.k, tensors.v, tensors.o,
                        tensors.lse ? &*tensors.lse : nullptr, options, device);
  return args;
}

BackwardArgs backward_args(const Spec& spec, const BackwardTensors& t, const CallOptions& options,
                           int& device) {
  BackwardArgs args;
  device = -1;
  set_attention_tensors("backward", args.forward, spec, t.q, t.k, t.v, t.o, &t.lse, options,
                        device);
  args.d_o = t.d_o.data;
  args.d_o_stride = gradient_strides("backward", t.d_o, t.o, spec, device);
  args.d_q = t.d_q.data;
  args.d_k = t.d_k.data;
  args.d_v = t.d_v.data;
  args.d_q_stride = gradient_strides("backward", t.d_q, t.q, spec, device);
  args.d_k_stride = gradient_strides("backward", t.d_k, t.k, spec, device);
  args.d_v_stride = gradient_strides("backward", t.d_v, t.v, spec, device);
  return args;
}

void set_workspace(BackwardArgs& args, const TensorView& workspace, size_t bytes, int device) {
  require_cuda("backward", workspace, device);
  require_contiguous("backward", workspace);
  args.workspace = workspace.data;
  args.workspace_bytes = bytes;
}

}  // namespace flashjit::py
