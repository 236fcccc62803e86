#include "runtime/tensor_maps.h"

#include <cstdint>

#include "generator/element_types.h"

namespace flashjit::rt {
namespace {

// A dimension of extent 1 is never stepped along, so its stride is free; TMA still wants a
// multiple of 16 there, whatever the caller's (unused) value is.
uint64_t stride_bytes(int64_t stride, int extent, int element_bytes) {
  return extent > 1 ? static_cast<uint64_t>(stride) * element_bytes : 16;
}

// Boxes of one panel's columns (TMA's 128-byte swizzle span) by `box_rows` rows.
TensorMapBox box_of(const gen::ElementType& element, const void* base, int dim, int seqlen,
                    int heads, int batch, const TensorStrides& stride, int box_rows) {
  const int e = element.bytes;
  TensorMapBox box;
  box.element = element.tma_type;
  box.base = base;
  box.dims[0] = static_cast<uint64_t>(dim);
  box.dims[1] = static_cast<uint64_t>(seqlen);
  box.dims[2] = static_cast<uint64_t>(heads);
  box.dims[3] = static_cast<uint64_t>(batch);
  box.stride_bytes[0] = stride_bytes(stride.seq, seqlen, e);
  box.stride_bytes[1] = stride_bytes(stride.head, heads, e);
  box.stride_bytes[2] = stride_bytes(stride.batch, batch, e);
  box.box[0] = static_cast<uint32_t>(gen::panel_cols(element));
  box.box[1] = static_cast<uint32_t>(box_rows);
  box.box[2] = 1;
  box.box[3] = 1;
  return box;
}

}  // namespace

// Packed varlen tensors are one batch of total rows; the kernel adds each sequence's start.
struct MapRows {
  int batch, rows_q, rows_k;
};
MapRows map_rows(const ForwardArgs& a) {
  const bool varlen = a.cu_seqlens_q != nullptr;
  return {varlen ? 1 : a.batch, varlen ? a.total_q : a.seqlen_q, varlen ? a.total_k : a.seqlen_k};
}

ForwardTensorMaps make_tensor_maps(Driver& driver, const gen::Plan& plan, const ForwardArgs& a) {
  const Spec& s = plan.spec;
  const gen::ElementType& e = gen::element_type(s.dtype);
  ForwardTensorMaps maps;
  const auto [batch, rows_q, rows_k] = map_rows(a);
  // Q arrives in two boxes, one a consumer warp group (its 64 rows: kernels/fwd_sm90.cuh).
  driver.encode_tensor_map(maps.q.bytes, box_of(e, a.q, s.head_dim_qk, rows_q, a.heads_q, batch,
                                                a.q_stride, plan.tiles.block_m / 2));
  driver.encode_tensor_map(maps.k.bytes, box_of(e, a.k, s.head_dim_qk, rows_k, a.heads_kv, batch,
                                                a.k_stride, plan.tiles.block_n));
  driver.encode_tensor_map(maps.v.bytes, box_of(e, a.v, s.head_dim_v, rows_k, a.heads_kv, batch,
                                                a.v_stride, plan.tiles.block_n));
  return maps;
}

BackwardTensorMaps make_tensor_maps(Driver& driver, const gen::Plan& plan,
                                    const BackwardArgs& args) {
  const Spec& s = plan.spec;
  const ForwardArgs& a = args.forward;
  const gen::ElementType& e = gen::element_type(s.dtype);
  BackwardTensorMaps maps;
  const auto [batch, rows_q, rows_k] = map_rows(a);
  const int m = plan.tiles.block_m, n = plan.tiles.block_n;
  driver.encode_tensor_map(maps.q.bytes, box_of(e, a.q, s.head_dim_qk, rows_q, a.heads_q, batch,
                                                a.q_stride, m));
  driver.encode_tensor_map(maps.k.bytes, box_of(e, a.k, s.head_dim_qk, rows_k, a.heads_kv, batch,
                                                a.k_stride, n));
  driver.encode_tensor_map(maps.v.bytes, box_of(e, a.v, s.head_dim_v, rows_k, a.heads_kv, batch,
                                                a.v_stride, n));
  driver.encode_tensor_map(maps.d_o.bytes, box_of(e, args.d_o, s.head_dim_v, rows_q, a.heads_q,
                                                  batch, args.d_o_stride, m));
  return maps;
}

}  // namespace flashjit::rt
