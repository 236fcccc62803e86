#include "runtime/merge_params.h"

#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "generator/element_types.h"
#include "runtime/arg_checks.h"
#include "runtime/forward_params.h"

namespace flashjit::rt {
namespace {

template <class... Args>
void require(bool ok, fmt::format_string<Args...> message, Args&&... args) {
  require_arg(ok, "merge", message, std::forward<Args>(args)...);
}

}  // namespace

void check_merge_args(const Spec& spec, const MergeArgs& a) {
  require(a.o_a && a.lse_a && a.o_b && a.lse_b && a.o && a.lse,
          "o_a, lse_a, o_b, lse_b, o and lse must be non-null (kernel {})", spec.name);
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  const uintptr_t e = gen::element_type(spec.dtype).bytes;
  require(aligned(a.o_a, e) && aligned(a.o_b, e) && aligned(a.o, e),
          "o_a={}, o_b={} and o={} must be {}-byte aligned", a.o_a, a.o_b, a.o, e);
  require(aligned(a.lse_a, 4) && aligned(a.lse_b, 4) && aligned(a.lse, 4),
          "lse_a, lse_b and lse must be 4-byte aligned (float)");
  require(a.batch >= 1 && a.heads >= 1 && a.seqlen >= 1,
          "batch = {}, heads = {} and seqlen = {} must be >= 1", a.batch, a.heads, a.seqlen);
  check_tensor_strides("merge", "o_a", a.o_a_stride, a.batch, a.seqlen, a.heads);
  check_tensor_strides("merge", "o_b", a.o_b_stride, a.batch, a.seqlen, a.heads);
  check_tensor_strides("merge", "o", a.o_stride, a.batch, a.seqlen, a.heads);
}

MergeParams make_merge_params(const MergeArgs& a) {
  MergeParams p{};
  p.o_a = a.o_a;
  p.lse_a = a.lse_a;
  p.o_b = a.o_b;
  p.lse_b = a.lse_b;
  p.o = a.o;
  p.lse = a.lse;
  p.a_batch_stride = a.o_a_stride.batch;
  p.a_seq_stride = a.o_a_stride.seq;
  p.a_head_stride = a.o_a_stride.head;
  p.b_batch_stride = a.o_b_stride.batch;
  p.b_seq_stride = a.o_b_stride.seq;
  p.b_head_stride = a.o_b_stride.head;
  p.o_batch_stride = a.o_stride.batch;
  p.o_seq_stride = a.o_stride.seq;
  p.o_head_stride = a.o_stride.head;
  p.batch = a.batch;
  p.heads = a.heads;
  p.seqlen = a.seqlen;
  return p;
}

}  // namespace flashjit::rt
