#include "runtime/backward_params.h"

#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "generator/element_types.h"
#include "runtime/arg_checks.h"
#include "runtime/forward_params.h"
#include "templates/tile/budgets.cuh"

namespace flashjit::rt {
namespace {

template <class... Args>
void require(bool ok, fmt::format_string<Args...> message, Args&&... args) {
  require_arg(ok, "backward", message, std::forward<Args>(args)...);
}

}  // namespace

void check_backward_args(const Spec& spec, const BackwardArgs& args) {
  check_forward_args(spec, args.forward);
  const ForwardArgs& f = args.forward;
  if (f.cache_seqlens != nullptr || f.block_table != nullptr)
    throw Error(ErrorKind::Usage, fmt::format("backward: kernel {}: a KV cache (cache_seqlens or "
                                              "block_table) has no backward pass",
                                              spec.name));
  require(f.lse != nullptr, "lse must be the forward's LSE, not null (kernel {})", spec.name);
  require(args.d_o && args.d_q && args.d_k && args.d_v,
          "the d_o, d_q, d_k and d_v pointers must be non-null (d_o={}, d_q={}, "
          "d_k={}, d_v={}) for kernel {}",
          args.d_o, args.d_q, args.d_k, args.d_v, spec.name);
  const uintptr_t e = gen::element_type(spec.dtype).bytes;
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  require(
      aligned(args.d_o, e) && aligned(args.d_q, e) && aligned(args.d_k, e) && aligned(args.d_v, e),
      "d_o, d_q, d_k and d_v must be {}-byte aligned (d_o={}, d_q={}, d_k={}, "
      "d_v={})",
      e, args.d_o, args.d_q, args.d_k, args.d_v);
  const int strided_batch = f.cu_seqlens_q != nullptr ? 1 : f.batch;
  check_tensor_strides("backward", "d_o", args.d_o_stride, strided_batch, f.seqlen_q, f.heads_q);
  check_tensor_strides("backward", "d_q", args.d_q_stride, strided_batch, f.seqlen_q, f.heads_q);
  check_tensor_strides("backward", "d_k", args.d_k_stride, strided_batch, f.seqlen_k, f.heads_kv);
  check_tensor_strides("backward", "d_v", args.d_v_stride, strided_batch, f.seqlen_k, f.heads_kv);
}

std::vector<ScratchBuffer> backward_scratch(const OperationPlan& op, const ForwardArgs& args) {
  // With cu_seqlens the rows are the packed total, which the host may not know: the batch
  // of longest sequences bounds it.
  const size_t rows = args.cu_seqlens_q != nullptr && args.total_q > 0
                          ? static_cast<size_t>(args.total_q)
                          : static_cast<size_t>(args.batch) * static_cast<size_t>(args.seqlen_q);
  const size_t heads = static_cast<size_t>(args.heads_q);
  std::vector<ScratchBuffer> scratch = {{"d_rows", sizeof(float) * rows * heads}};
  // dq_accum: blocks of kDqAccumTileRows rows a (head, query tile), as wide as the dK/dV
  // kernel's column splits together, a head's rows / kDqAccumTileRows + batch + 1 blocks
  // apart (templates/attn/dq_accum.cuh).
  for (const gen::Plan& plan : op.launches) {
    if (!plan.path->accumulates_dq) continue;
    const size_t blocks =
        (rows / fj::budget::kDqAccumTileRows + static_cast<size_t>(args.batch) + 1) * heads;
    const size_t block_floats = static_cast<size_t>(fj::budget::kDqAccumTileRows) *
                                static_cast<size_t>(plan.dk_slice * plan.dv_splits);
    scratch.push_back({"dq_accum", sizeof(float) * blocks * block_floats, true});
    if (plan.path->orders_dq_adds)
      scratch.push_back({"dq_turns", sizeof(int) * fj::budget::kDqTurnsPerBlock * blocks, true});
  }
  return scratch;
}

void check_backward_workspace(const BackwardArgs& args, const std::vector<ScratchBuffer>& scratch) {
  if (args.workspace == nullptr) return;
  const size_t need = workspace_bytes(scratch);
  require(args.workspace_bytes >= need,
          "workspace_bytes = {} is less than the {} bytes this call needs "
          "(Kernel::backward_workspace_bytes)",
          args.workspace_bytes, need);
  require(reinterpret_cast<uintptr_t>(args.workspace) % 256 == 0,
          "workspace={} must be 256-byte aligned", args.workspace);
}

BwdParams make_bwd_params(const Spec& spec, const BackwardArgs& args,
                          const std::vector<ScratchBuffer>& scratch,
                          const std::vector<void*>& buffers) {
  BwdParams params{};
  fill_attn_params(params, spec, args.forward);
  params.d_o = args.d_o;
  params.d_q = args.d_q;
  params.d_k = args.d_k;
  params.d_v = args.d_v;
  params.do_batch_stride = args.d_o_stride.batch;
  params.do_seq_stride = args.d_o_stride.seq;
  params.do_head_stride = args.d_o_stride.head;
  params.dq_batch_stride = args.d_q_stride.batch;
  params.dq_seq_stride = args.d_q_stride.seq;
  params.dq_head_stride = args.d_q_stride.head;
  params.dk_batch_stride = args.d_k_stride.batch;
  params.dk_seq_stride = args.d_k_stride.seq;
  params.dk_head_stride = args.d_k_stride.head;
  params.dv_batch_stride = args.d_v_stride.batch;
  params.dv_seq_stride = args.d_v_stride.seq;
  params.dv_head_stride = args.d_v_stride.head;
  params.d_rows = static_cast<float*>(scratch_named(scratch, buffers, "d_rows"));
  params.dq_accum = static_cast<float*>(scratch_named(scratch, buffers, "dq_accum"));
  params.dq_turns = static_cast<int*>(scratch_named(scratch, buffers, "dq_turns"));
  return params;
}

}  // namespace flashjit::rt
