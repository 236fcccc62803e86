#include "runtime/call_traits.h"

#include <algorithm>
#include <cstdint>

#include "generator/element_types.h"
#include "runtime/staging.h"

namespace flashjit::rt {
namespace {

// Every row start is base + b*batch + s*seq + h*head (in elements): its alignment is the
// common power of two of the base and of the strides, in bytes, of dimensions with extent > 1.
uint64_t row_start_bits(const void* base, const TensorStrides& st, int batch, int seqlen,
                        int heads, int element_bytes) {
  const auto bytes = [&](int64_t stride) { return static_cast<uint64_t>(stride) * element_bytes; };
  uint64_t bits = reinterpret_cast<uint64_t>(base);
  if (batch > 1) bits |= bytes(st.batch);
  if (seqlen > 1) bits |= bytes(st.seq);
  if (heads > 1) bits |= bytes(st.head);
  return bits;
}

uint64_t qkv_bits(const Spec& spec, const ForwardArgs& a) {
  const int e = gen::element_type(spec.dtype).bytes;
  // A paged cache's first dimension is its pages.
  const int cache_batch = a.block_table != nullptr ? a.num_pages : a.batch;
  const int cache_rows = a.block_table != nullptr ? a.page_size : a.seqlen_k;
  return row_start_bits(a.q, a.q_stride, a.batch, a.seqlen_q, a.heads_q, e) |
         row_start_bits(a.k, a.k_stride, cache_batch, cache_rows, a.heads_kv, e) |
         row_start_bits(a.v, a.v_stride, cache_batch, cache_rows, a.heads_kv, e);
}

// A packed varlen tensor's map needs its row count, which only the caller knows; an empty one
// has no map at all.
bool map_rows_known(const ForwardArgs& a) {
  return a.cu_seqlens_q == nullptr || (a.total_q > 0 && a.total_k > 0);
}

int alignment_of(uint64_t bits) {
  bits |= 16;
  return static_cast<int>(bits & (~bits + 1));  // lowest set bit, at most 16
}

}  // namespace

int forward_alignment(const Spec& spec, const ForwardArgs& a) {
  const int e = gen::element_type(spec.dtype).bytes;
  return alignment_of(qkv_bits(spec, a) |
                      row_start_bits(a.o, a.o_stride, a.batch, a.seqlen_q, a.heads_q, e));
}

bool tma_loadable(const Spec& spec, const ForwardArgs& a) {
  return map_rows_known(a) && forward_staging(spec, a).possible;
}

gen::CallTraits forward_call_traits(const Spec& spec, const ForwardArgs& args) {
  return {.align_bytes = forward_alignment(spec, args),
          .tma_loadable = tma_loadable(spec, args),
          .varlen = args.cu_seqlens_q != nullptr};
}

gen::CallTraits decode_call_traits(const Spec& spec, const ForwardArgs& args) {
  return {.align_bytes = forward_alignment(spec, args),
          .tma_loadable = false,
          .varlen = false,
          .paged = args.block_table != nullptr};
}

int backward_alignment(const Spec& spec, const BackwardArgs& a) {
  const ForwardArgs& f = a.forward;
  const int e = gen::element_type(spec.dtype).bytes;
  return alignment_of(qkv_bits(spec, f) |
                      row_start_bits(f.o, f.o_stride, f.batch, f.seqlen_q, f.heads_q, e) |
                      row_start_bits(a.d_o, a.d_o_stride, f.batch, f.seqlen_q, f.heads_q, e) |
                      row_start_bits(a.d_q, a.d_q_stride, f.batch, f.seqlen_q, f.heads_q, e) |
                      row_start_bits(a.d_k, a.d_k_stride, f.batch, f.seqlen_k, f.heads_kv, e) |
                      row_start_bits(a.d_v, a.d_v_stride, f.batch, f.seqlen_k, f.heads_kv, e));
}

bool backward_tma_loadable(const Spec& spec, const BackwardArgs& a) {
  // backward_staging looks at Q, K and V as well as dO.
  return map_rows_known(a.forward) && backward_staging(spec, a).possible;
}

gen::CallTraits backward_call_traits(const Spec& spec, const BackwardArgs& args) {
  return {.align_bytes = backward_alignment(spec, args),
          .tma_loadable = backward_tma_loadable(spec, args),
          .varlen = args.forward.cu_seqlens_q != nullptr};
}

LaunchGeometry launch_geometry(const gen::Plan& plan, const ForwardArgs& args, int sm_count,
                               int kv_splits) {
  LaunchGeometry g;
  const auto blocks = [](long long rows, int block) {
    return static_cast<unsigned>((rows + block - 1) / block);
  };
  switch (plan.path->grid_over) {
    case gen::GridOver::QueryRows:
      g.grid_x = blocks(args.seqlen_q, plan.tiles.block_m);
      g.grid_y = static_cast<unsigned>(args.heads_q);
      g.grid_z = static_cast<unsigned>(args.batch * plan.dv_splits);
      break;
    case gen::GridOver::KeyRows:
      g.grid_x = blocks(args.seqlen_k, plan.tiles.block_n);
      g.grid_y = static_cast<unsigned>(args.heads_kv);
      g.grid_z = static_cast<unsigned>(args.batch * plan.dv_splits);
      break;
    case gen::GridOver::PackedRows:
      g.grid_x = blocks(1LL * args.seqlen_q * (args.heads_q / args.heads_kv), plan.tiles.block_m);
      g.grid_y = static_cast<unsigned>(args.heads_kv);
      g.grid_z = static_cast<unsigned>(args.batch * plan.dv_splits * kv_splits);
      break;
    case gen::GridOver::CombineRows:
      g.grid_x = blocks(1LL * args.batch * args.heads_q * args.seqlen_q, plan.tiles.block_m);
      break;
  }
  if (plan.path->persistent_grid) {
    // One CTA a multiprocessor (its threads hold the whole register file), each drawing
    // tiles until the grid's are done.
    const long long tiles = 1LL * g.grid_x * g.grid_y * g.grid_z;
    g.grid_x = static_cast<unsigned>(std::min<long long>(tiles, std::max(sm_count, 1)));
    g.grid_y = g.grid_z = 1;
  }
  g.block_x = static_cast<unsigned>(plan.threads);
  g.shared_bytes = static_cast<unsigned>(plan.shared_bytes);
  return g;
}

}  // namespace flashjit::rt
