#include "runtime/tensor_maps.h"

#include <cstdint>

namespace flashjit::rt {
namespace {

constexpr uint32_t kPanelCols = 64;  // 128 bytes of 2-byte elements: the swizzle span

// A dimension of extent 1 is never stepped along, so its stride is free; TMA still wants a
// multiple of 16 there, whatever the caller's (unused) value is.
uint64_t stride_bytes(int64_t stride, int extent) {
  return extent > 1 ? static_cast<uint64_t>(stride) * 2 : 16;
}

TensorMapBox box_of(const void* base, int dim, int seqlen, int heads, int batch,
                    const TensorStrides& stride, int box_rows) {
  TensorMapBox box;
  box.base = base;
  box.dims[0] = static_cast<uint64_t>(dim);
  box.dims[1] = static_cast<uint64_t>(seqlen);
  box.dims[2] = static_cast<uint64_t>(heads);
  box.dims[3] = static_cast<uint64_t>(batch);
  box.stride_bytes[0] = stride_bytes(stride.seq, seqlen);
  box.stride_bytes[1] = stride_bytes(stride.head, heads);
  box.stride_bytes[2] = stride_bytes(stride.batch, batch);
  box.box[0] = kPanelCols;
  box.box[1] = static_cast<uint32_t>(box_rows);
  box.box[2] = 1;
  box.box[3] = 1;
  return box;
}

}  // namespace

bool tma_loadable(const ForwardArgs& a) {
  // A packed varlen tensor's map needs its row count, which only the caller knows; an empty
  // one has no map at all.
  const bool rows_known = a.cu_seqlens_q == nullptr || (a.total_q > 0 && a.total_k > 0);
  return rows_known && gen::qkv_alignment(a) == 16;
}

ForwardTensorMaps make_tensor_maps(const gen::Plan& plan, const ForwardArgs& a) {
  const Spec& s = plan.spec;
  ForwardTensorMaps maps;
  Driver& driver = Driver::get();
  // Packed varlen tensors are one batch of total rows; the kernel adds each sequence's start.
  const bool varlen = a.cu_seqlens_q != nullptr;
  const int batch = varlen ? 1 : a.batch;
  const int rows_q = varlen ? a.total_q : a.seqlen_q, rows_k = varlen ? a.total_k : a.seqlen_k;
  // Q arrives in two boxes, one a consumer warp group (its 64 rows: fwd_sm90.cuh).
  driver.encode_tensor_map(maps.q.bytes, box_of(a.q, s.head_dim_qk, rows_q, a.heads_q, batch,
                                                a.q_stride, plan.tiles.block_m / 2));
  driver.encode_tensor_map(maps.k.bytes, box_of(a.k, s.head_dim_qk, rows_k, a.heads_kv, batch,
                                                a.k_stride, plan.tiles.block_n));
  driver.encode_tensor_map(maps.v.bytes, box_of(a.v, s.head_dim_v, rows_k, a.heads_kv, batch,
                                                a.v_stride, plan.tiles.block_n));
  return maps;
}

}  // namespace flashjit::rt
