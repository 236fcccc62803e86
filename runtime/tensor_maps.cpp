#include "runtime/tensor_maps.h"

#include <cstdint>

#include "generator/element_types.h"
#include "runtime/tensor_rows.h"

namespace flashjit::rt {
namespace {

// A dimension of extent 1 is never stepped along, so its stride is free; TMA still wants a
// multiple of 16 there, whatever the caller's (unused) value is.
uint64_t stride_bytes(int64_t stride, int extent, int element_bytes) {
  return extent > 1 ? static_cast<uint64_t>(stride) * element_bytes : 16;
}

// Boxes of one panel's columns (rows of `row_bytes`, the swizzle span) by `box_rows` rows.
TensorMapBox box_of(const gen::ElementType& element, const TensorRows& rows, int box_rows,
                    int row_bytes) {
  const int e = element.bytes;
  TensorMapBox box;
  box.element = element.tma_type;
  box.base = rows.base;
  box.dims[0] = static_cast<uint64_t>(rows.dim);
  box.dims[1] = static_cast<uint64_t>(rows.seqlen);
  box.dims[2] = static_cast<uint64_t>(rows.heads);
  box.dims[3] = static_cast<uint64_t>(rows.batch);
  box.stride_bytes[0] = stride_bytes(rows.stride.seq, rows.seqlen, e);
  box.stride_bytes[1] = stride_bytes(rows.stride.head, rows.heads, e);
  box.stride_bytes[2] = stride_bytes(rows.stride.batch, rows.batch, e);
  box.box[0] = static_cast<uint32_t>(row_bytes / e);
  box.swizzle_bytes = row_bytes;
  box.box[1] = static_cast<uint32_t>(box_rows);
  box.box[2] = 1;
  box.box[3] = 1;
  return box;
}

}  // namespace

ForwardTensorMaps make_tensor_maps(Driver& driver, const gen::Plan& plan, const ForwardArgs& a) {
  const Spec& s = plan.spec;
  const gen::ElementType& e = gen::element_type(s.dtype);
  ForwardTensorMaps maps;
  // Q arrives in two boxes, one a consumer warp group (its 64 rows: kernels/fwd_sm90.cuh).
  const int row = plan.panel_row_bytes;
  driver.encode_tensor_map(maps.q.bytes, box_of(e, q_rows(s, a), plan.tiles.block_m / 2, row));
  driver.encode_tensor_map(maps.k.bytes, box_of(e, k_rows(s, a), plan.tiles.block_n, row));
  driver.encode_tensor_map(maps.v.bytes, box_of(e, v_rows(s, a), plan.tiles.block_n, row));
  return maps;
}

BackwardTensorMaps make_tensor_maps(Driver& driver, const gen::Plan& plan,
                                    const BackwardArgs& args) {
  const Spec& s = plan.spec;
  const ForwardArgs& a = args.forward;
  const gen::ElementType& e = gen::element_type(s.dtype);
  BackwardTensorMaps maps;
  const int m = plan.tiles.block_m, n = plan.tiles.block_n, row = plan.panel_row_bytes;
  driver.encode_tensor_map(maps.q.bytes, box_of(e, q_rows(s, a), m, row));
  driver.encode_tensor_map(maps.k.bytes, box_of(e, k_rows(s, a), n, row));
  driver.encode_tensor_map(maps.v.bytes, box_of(e, v_rows(s, a), n, row));
  driver.encode_tensor_map(maps.d_o.bytes, box_of(e, d_o_rows(s, args), m, row));
  return maps;
}

}  // namespace flashjit::rt
