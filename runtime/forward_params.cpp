#include "runtime/forward_params.h"

#include <cmath>
#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "generator/dec_sm80_path.h"
#include "generator/element_types.h"
#include "runtime/arg_checks.h"
#include "runtime/decode_params.h"

namespace flashjit::rt {
namespace {

template <class... Args>
void require(bool ok, fmt::format_string<Args...> message, Args&&... args) {
  require_arg(ok, "forward", message, std::forward<Args>(args)...);
}

void check_strides(const char* tensor, const TensorStrides& stride, int batch, int seqlen,
                   int heads) {
  check_tensor_strides("forward", tensor, stride, batch, seqlen, heads);
}

// The block-sparse layout and the varlen prefix sums (flashjit.h, ForwardArgs).
void check_mask_args(const Spec& spec, const ForwardArgs& a) {
  const bool has_layout = a.block_counts != nullptr || a.block_indices != nullptr;
  if (spec.mask != MaskKind::BlockSparse) {
    require(!has_layout,
            "block_counts/block_indices are given but kernel {} has "
            "mask {}, not block_sparse",
            spec.name, to_string(spec.mask));
  } else {
    require(a.block_counts != nullptr && a.block_indices != nullptr,
            "kernel {} has a block_sparse mask: block_counts and block_indices "
            "must be non-null",
            spec.name);
    require(a.layout_batch == 1 || a.layout_batch == a.batch,
            "layout_batch = {} must be 1 or batch = {}", a.layout_batch, a.batch);
    require(a.layout_heads == 1 || a.layout_heads == a.heads_q,
            "layout_heads = {} must be 1 or heads_q = {}", a.layout_heads, a.heads_q);
    const int q_blocks = (a.seqlen_q + spec.block_q - 1) / spec.block_q;
    require(a.layout_q_blocks >= q_blocks,
            "layout_q_blocks = {} must be >= ceil(seqlen_q {} / block_q {}) = {}",
            a.layout_q_blocks, a.seqlen_q, spec.block_q, q_blocks);
    require(a.layout_max_blocks >= 1, "layout_max_blocks = {} must be >= 1", a.layout_max_blocks);
    const auto aligned4 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
    require(aligned4(a.block_counts) && aligned4(a.block_indices),
            "block_counts={} and block_indices={} must be 4-byte aligned (int32)",
            static_cast<const void*>(a.block_counts), static_cast<const void*>(a.block_indices));
  }
  require((a.cu_seqlens_q == nullptr) == (a.cu_seqlens_k == nullptr),
          "cu_seqlens_q={} and cu_seqlens_k={}: give both or neither",
          static_cast<const void*>(a.cu_seqlens_q), static_cast<const void*>(a.cu_seqlens_k));
  if (a.cu_seqlens_q == nullptr) {
    require(a.total_q == 0 && a.total_k == 0,
            "total_q = {} and total_k = {} are for varlen calls (cu_seqlens): "
            "leave them 0",
            a.total_q, a.total_k);
  } else {
    require(a.total_q >= 0 && a.total_k >= 0,
            "total_q = {} and total_k = {} must be >= 0 (0: not known)", a.total_q, a.total_k);
  }
}

// The KV cache's lengths and page table (flashjit.h, ForwardArgs).
void check_cache_args(const Spec& spec, const ForwardArgs& a) {
  const auto aligned4 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
  const bool cache = a.cache_seqlens != nullptr || a.block_table != nullptr;
  if (cache && spec.decode == DecodeMode::Never)
    throw Error(ErrorKind::Usage,
                fmt::format("forward: kernel {} has decode: never, but the call has a KV cache "
                            "(cache_seqlens or block_table), which only the decode kernels read",
                            spec.name));
  if (cache && (a.cu_seqlens_q != nullptr || !gen::decode_serves_mask(spec)))
    throw Error(ErrorKind::Usage,
                fmt::format("forward: a KV cache (cache_seqlens or block_table) is not served "
                            "with {} yet (kernel {})",
                            a.cu_seqlens_q != nullptr ? "cu_seqlens" : "a block mask", spec.name));
  require(aligned4(a.cache_seqlens), "cache_seqlens={} must be 4-byte aligned (int32)",
          static_cast<const void*>(a.cache_seqlens));
  if (a.block_table == nullptr) {
    require(a.page_size == 0 && a.max_pages == 0 && a.num_pages == 0,
            "page_size = {}, max_pages = {} and num_pages = {} are for a paged "
            "cache (block_table): leave them 0",
            a.page_size, a.max_pages, a.num_pages);
    return;
  }
  require(aligned4(a.block_table), "block_table={} must be 4-byte aligned (int32)",
          static_cast<const void*>(a.block_table));
  require(a.page_size >= 1 && a.max_pages >= 1 && a.num_pages >= 1,
          "page_size = {}, max_pages = {} and num_pages = {} must be >= 1 with a "
          "block_table",
          a.page_size, a.max_pages, a.num_pages);
  require(static_cast<int64_t>(a.max_pages) * a.page_size >= a.seqlen_k,
          "seqlen_k = {} must be at most max_pages * page_size = {} * {}", a.seqlen_k, a.max_pages,
          a.page_size);
}

// kv_splits picks decode's split count; a call that runs the forward kernel splits no keys,
// and ignoring the request would hide that it asked for the wrong kernel.
void check_kv_splits(const Spec& spec, const ForwardArgs& a) {
  if (a.kv_splits == 0) return;
  require(a.kv_splits >= 1 && a.kv_splits <= kMaxKvSplits,
          "kv_splits = {} must be 0 (the runtime's choice) or 1..{}", a.kv_splits, kMaxKvSplits);
  require(takes_decode(spec, a),
          "kv_splits = {} is for calls that run the decode kernels, and this one "
          "runs the forward kernel (decode takes KV-cache calls, and others of at "
          "most {} packed query rows against at least {} keys unless the spec says "
          "decode: always or never); leave it 0",
          a.kv_splits, kDecodeMaxPackedRows, kDecodeMinKeys);
}

}  // namespace

void check_tensor_strides(const char* operation, const char* tensor, const TensorStrides& stride,
                          int batch, int seqlen, int heads) {
  const auto check = [&](const char* dim, int64_t value, int extent) {
    if (extent > 1 && value < 1)
      throw Error(ErrorKind::Shape,
                  fmt::format("{}: {}_stride.{} = {} must be >= 1 ({} has {} = {})", operation,
                              tensor, dim, value, tensor, dim, extent));
  };
  check("batch", stride.batch, batch);
  check("seq", stride.seq, seqlen);
  check("head", stride.head, heads);
}

void check_forward_args(const Spec& spec, const ForwardArgs& args) {
  require(args.q && args.k && args.v && args.o,
          "the q, k, v and o pointers must be non-null (q={}, k={}, v={}, o={}) for "
          "kernel {}",
          args.q, args.k, args.v, static_cast<const void*>(args.o), spec.name);
  // The kernel reads whole elements and writes fp32 LSE: a pointer off that alignment is a
  // caller's mistake (an offset in bytes where elements were meant), not a slow path.
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  const uintptr_t e = gen::element_type(spec.dtype).bytes;
  require(aligned(args.q, e) && aligned(args.k, e) && aligned(args.v, e) && aligned(args.o, e),
          "q, k, v and o must be {}-byte aligned (q={}, k={}, v={}, o={})", e, args.q, args.k,
          args.v, static_cast<const void*>(args.o));
  require(aligned(args.lse, 4), "lse={} must be 4-byte aligned (float)",
          static_cast<const void*>(args.lse));
  require(args.batch >= 1, "batch = {} must be >= 1", args.batch);
  require(args.heads_q >= 1, "heads_q = {} must be >= 1", args.heads_q);
  require(args.heads_kv >= 1, "heads_kv = {} must be >= 1", args.heads_kv);
  require(args.seqlen_q >= 1, "seqlen_q = {} must be >= 1", args.seqlen_q);
  require(args.seqlen_k >= 1, "seqlen_k = {} must be >= 1", args.seqlen_k);
  require(args.heads_q % args.heads_kv == 0, "heads_q = {} must be a multiple of heads_kv = {}",
          args.heads_q, args.heads_kv);
  require(std::isfinite(args.softmax_scale) && args.softmax_scale >= 0.f,
          "softmax_scale = {} must be finite and >= 0 (0 picks 1/sqrt(head_dim_qk))",
          args.softmax_scale);
  check_mask_args(spec, args);
  check_cache_args(spec, args);
  check_kv_splits(spec, args);
  // Packed varlen tensors have no batch dimension: its stride is never used. A paged cache's
  // first dimension is its pages.
  const int strided_batch = args.cu_seqlens_q != nullptr ? 1 : args.batch;
  const int cache_batch = args.block_table != nullptr ? args.num_pages : strided_batch;
  const int cache_rows = args.block_table != nullptr ? args.page_size : args.seqlen_k;
  check_strides("q", args.q_stride, strided_batch, args.seqlen_q, args.heads_q);
  check_strides("k", args.k_stride, cache_batch, cache_rows, args.heads_kv);
  check_strides("v", args.v_stride, cache_batch, cache_rows, args.heads_kv);
  check_strides("o", args.o_stride, strided_batch, args.seqlen_q, args.heads_q);
}

void fill_mask_params(AttnParams& params, const ForwardArgs& args) {
  params.block_sparse.counts = args.block_counts;
  params.block_sparse.indices = args.block_indices;
  // Entries of block_counts; a dimension of size 1 is shared (broadcast): stride 0.
  const long long per_head = args.layout_q_blocks;
  params.block_sparse.head_stride = args.layout_heads > 1 ? per_head : 0;
  params.block_sparse.batch_stride = args.layout_batch > 1 ? per_head * args.layout_heads : 0;
  params.block_sparse.max_blocks = args.layout_max_blocks;
  params.cu_seqlens_q = args.cu_seqlens_q;
  params.cu_seqlens_k = args.cu_seqlens_k;
}

void fill_attn_params(AttnParams& params, const Spec& spec, const ForwardArgs& args) {
  constexpr double kLog2e = 1.4426950408889634;
  const double scale = args.softmax_scale > 0.f
                           ? static_cast<double>(args.softmax_scale)
                           : 1.0 / std::sqrt(static_cast<double>(spec.head_dim_qk));
  params.q = args.q;
  params.k = args.k;
  params.v = args.v;
  params.o = args.o;
  params.lse = args.lse;
  params.q_batch_stride = args.q_stride.batch;
  params.q_seq_stride = args.q_stride.seq;
  params.q_head_stride = args.q_stride.head;
  params.k_batch_stride = args.k_stride.batch;
  params.k_seq_stride = args.k_stride.seq;
  params.k_head_stride = args.k_stride.head;
  params.v_batch_stride = args.v_stride.batch;
  params.v_seq_stride = args.v_stride.seq;
  params.v_head_stride = args.v_stride.head;
  params.o_batch_stride = args.o_stride.batch;
  params.o_seq_stride = args.o_stride.seq;
  params.o_head_stride = args.o_stride.head;
  params.batch = args.batch;
  params.heads_q = args.heads_q;
  params.heads_kv = args.heads_kv;
  params.seqlen_q = args.seqlen_q;
  params.seqlen_k = args.seqlen_k;
  params.heads_per_kv = args.heads_q / args.heads_kv;
  params.softmax_scale = static_cast<float>(scale);
  params.scale_log2 = static_cast<float>(scale * kLog2e);
  fill_mask_params(params, args);
}

FwdParams make_fwd_params(const gen::Plan& plan, const ForwardArgs& args) {
  FwdParams params{};
  fill_attn_params(params, plan.spec, args);
  return params;
}

}  // namespace flashjit::rt
