#include "runtime/tensor_rows.h"

namespace flashjit::rt {
namespace {

bool varlen(const ForwardArgs& a) { return a.cu_seqlens_q != nullptr; }

}  // namespace

TensorRows q_rows(const Spec& spec, const ForwardArgs& a) {
  return {a.q, a.q_stride, varlen(a) ? 1 : a.batch, varlen(a) ? a.total_q : a.seqlen_q,
          a.heads_q, spec.head_dim_qk};
}

TensorRows k_rows(const Spec& spec, const ForwardArgs& a) {
  return {a.k, a.k_stride, varlen(a) ? 1 : a.batch, varlen(a) ? a.total_k : a.seqlen_k,
          a.heads_kv, spec.head_dim_qk};
}

TensorRows v_rows(const Spec& spec, const ForwardArgs& a) {
  return {a.v, a.v_stride, varlen(a) ? 1 : a.batch, varlen(a) ? a.total_k : a.seqlen_k,
          a.heads_kv, spec.head_dim_v};
}

TensorRows d_o_rows(const Spec& spec, const BackwardArgs& a) {
  TensorRows rows = q_rows(spec, a.forward);
  rows.base = a.d_o;
  rows.stride = a.d_o_stride;
  rows.dim = spec.head_dim_v;
  return rows;
}

}  // namespace flashjit::rt
