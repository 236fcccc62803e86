#include "runtime/tensor_maps.h"

#include <cstdint>

namespace flashjit::rt {
namespace {

constexpr uint32_t kPanelCols = 64;  // 128 bytes of 2-byte elements: the swizzle span

bool multiple_of_16_bytes(int64_t stride, int extent) {
  return extent <= 1 || (stride * 2) % 16 == 0;
}

// A dimension of extent 1 is never stepped along, so its stride is free; TMA still wants a
// multiple of 16 there, whatever the caller's (unused) value is.
uint64_t stride_bytes(int64_t stride, int extent) {
  return extent > 1 ? static_cast<uint64_t>(stride) * 2 : 16;
}

struct Encoded {
  TensorMapBox box;
  TmaHeadStep step;
  bool heads_end_to_end;
};

Encoded encode(const void* base, int dim, int seqlen, int heads, int batch,
               const TensorStrides& stride, int box_rows) {
  Encoded e;
  TensorMapBox& box = e.box;
  box.base = base;
  e.heads_end_to_end = !multiple_of_16_bytes(stride.head, heads);
  if (e.heads_end_to_end) {
    box.dims[0] = static_cast<uint64_t>((heads - 1) * stride.head + dim);
    box.dims[2] = 1;
    box.stride_bytes[1] = 16;
    e.step = {static_cast<int>(stride.head), 0};
  } else {
    box.dims[0] = static_cast<uint64_t>(dim);
    box.dims[2] = static_cast<uint64_t>(heads);
    box.stride_bytes[1] = stride_bytes(stride.head, heads);
    e.step = {0, 1};
  }
  box.dims[1] = static_cast<uint64_t>(seqlen);
  box.dims[3] = static_cast<uint64_t>(batch);
  box.stride_bytes[0] = stride_bytes(stride.seq, seqlen);
  box.stride_bytes[2] = stride_bytes(stride.batch, batch);
  box.box[0] = kPanelCols;
  box.box[1] = static_cast<uint32_t>(box_rows);
  box.box[2] = 1;
  box.box[3] = 1;
  return e;
}

bool base_and_rows_fit(const void* base, const TensorStrides& stride, int seqlen, int batch) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && multiple_of_16_bytes(stride.seq, seqlen) &&
         multiple_of_16_bytes(stride.batch, batch);
}

}  // namespace

bool tma_loadable(const ForwardArgs& a) {
  return base_and_rows_fit(a.q, a.q_stride, a.seqlen_q, a.batch) &&
         base_and_rows_fit(a.k, a.k_stride, a.seqlen_k, a.batch) &&
         base_and_rows_fit(a.v, a.v_stride, a.seqlen_k, a.batch);
}

ForwardTensorMaps make_tensor_maps(const gen::Plan& plan, const ForwardArgs& a,
                                   FwdParams& params) {
  const Spec& s = plan.spec;
  const Encoded q = encode(a.q, s.head_dim_qk, a.seqlen_q, a.heads_q, a.batch, a.q_stride,
                           plan.tiles.block_m);
  const Encoded k = encode(a.k, s.head_dim_qk, a.seqlen_k, a.heads_kv, a.batch, a.k_stride,
                           plan.tiles.block_n);
  const Encoded v = encode(a.v, s.head_dim_v, a.seqlen_k, a.heads_kv, a.batch, a.v_stride,
                           plan.tiles.block_n);
  ForwardTensorMaps maps;
  Driver& driver = Driver::get();
  driver.encode_tensor_map(maps.q.bytes, q.box);
  driver.encode_tensor_map(maps.k.bytes, k.box);
  driver.encode_tensor_map(maps.v.bytes, v.box);
  params.q_tma = q.step;
  params.k_tma = k.step;
  params.v_tma = v.step;
  // Within a head, TMA zero-fills the columns past head_dim (they lie outside the box's
  // tensor); laid end to end, they hold the next head.
  params.qk_pad_dirty = s.head_dim_qk % 16 != 0 && (q.heads_end_to_end || k.heads_end_to_end);
  return maps;
}

}  // namespace flashjit::rt
