"""flashjit's kernels as PyTorch operators: ``flashjit::forward`` and ``flashjit::backward``,
defined with torch.library, each with a CUDA and a fake implementation, so
torch.compile(fullgraph=True) keeps them in its graph and CUDA graphs capture them, and with
autograd: the forward's gradient runs the backward op (which refuses a second derivative).

    import flashjit.torch as fjt
    o = fjt.attention(q, k, v, causal=True)                     # [batch, seqlen, heads, dim]
    o = fjt.scaled_dot_product_attention(q, k, v, is_causal=True)  # SDPA's [batch, heads, seqlen, dim]

A kernel compiles on its first call: make one call (or Kernel.compile()) before capturing a
CUDA graph. The ops take the spec as YAML text, a constant that torch.compile folds into the
graph; their implementations keep one flashjit.Kernel per spec text.

The ops are defined with torch.library.Library rather than torch.library.custom_op, whose
Python wrappers around each call cost more than the launch. In eager mode, where the
dispatcher would add nothing (plain CUDA tensors; no torch.compile, TorchDispatchMode such as
FakeTensorMode, TorchFunctionMode, vmap or other functorch transform, torch.jit.trace or
profiler), attention() and the gradient call the ops' implementations themselves, sparing
the dispatcher's two calls into Python; otherwise they call the ops. Either way the same
kernels run on the same tensors. A profile of eager code therefore shows flashjit::forward
only while the profiler records; a RecordFunction observer without it (ExecutionTraceObserver
alone) sees the launch's allocations, not the op. bench/python_overhead.py times each route.
"""

import atexit
import functools
from typing import Any, Optional, Tuple

import torch

from . import _core
from ._kernel import Kernel

Tensor = torch.Tensor
_C = torch._C


@functools.lru_cache(maxsize=None)
def _kernel(spec_yaml: str) -> Kernel:
    return Kernel(spec_yaml)


atexit.register(_kernel.cache_clear)  # as flashjit._attention's cache


def _unit_stride(t: Tensor) -> Tensor:
    """`t`, or a contiguous copy where the kernels cannot read it: a head-dim stride other
    than 1, or a broadcast (stride 0) dimension, as the gradient of a sum() has."""
    strides = t.stride()
    if strides[-1] == 1 and (0 not in strides or all(s or n == 1 for s, n in zip(strides, t.shape))):
        return t
    return t.contiguous()


# The registrations live as long as this object, hence a module global.
_lib = torch.library.Library("flashjit", "DEF")
_lib.define("forward(Tensor q, Tensor k, Tensor v, str spec, float softmax_scale, "
            "Tensor? block_counts, Tensor? block_indices, Tensor? cu_seqlens_q, "
            "Tensor? cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k) -> (Tensor, Tensor)",
            tags=torch.Tag.pt2_compliant_tag)
_lib.define("backward(Tensor d_o, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, str spec, "
            "float softmax_scale, Tensor? block_counts, Tensor? block_indices, "
            "Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, SymInt max_seqlen_q, "
            "SymInt max_seqlen_k) -> (Tensor, Tensor, Tensor)",
            tags=torch.Tag.pt2_compliant_tag)

#: The forward of the kernel of `spec` (YAML text): (o, lse) as flashjit.Kernel returns them.
forward_op = torch.ops.flashjit.forward.default
#: The backward of the kernel of `spec`: (d_q, d_k, d_v) as flashjit.Kernel.backward.
backward_op = torch.ops.flashjit.backward.default


def _forward_outputs(q: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """Empty o and lse: the CUDA implementation writes them, the fake one returns them, so the
    two agree on shapes and strides by construction."""
    shape = q.shape  # read once: each read makes a torch.Size
    o = q.new_empty(*shape[:-1], v.shape[-1])
    if cu_seqlens_q is not None:  # packed [total_q, heads_q, dim]: lse [heads_q, total_q]
        return o, q.new_empty(shape[1], shape[0], dtype=torch.float32)
    return o, q.new_empty(shape[0], shape[2], shape[1], dtype=torch.float32)


def _forward_cuda(q, k, v, spec, softmax_scale, block_counts, block_indices, cu_seqlens_q,
                  cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    o, lse = _forward_outputs(q, v, cu_seqlens_q)
    _launch_forward(q, k, v, o, lse, spec, softmax_scale, block_counts, block_indices,
                    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return o, lse


def _forward_o_only(q, k, v, spec, softmax_scale, block_counts, block_indices, cu_seqlens_q,
                    cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """attention()'s direct route where neither a gradient nor lse is wanted: the kernel
    writes no LSE, which spares its allocation (a few us of torch's allocator a call)."""
    o = q.new_empty(*q.shape[:-1], v.shape[-1])
    _launch_forward(q, k, v, o, None, spec, softmax_scale, block_counts, block_indices,
                    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return o


def _launch_forward(q, k, v, o, lse, spec, softmax_scale, block_counts, block_indices,
                    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    kernel = _kernel(spec)
    # Kernel.__call__'s launch without its argument handling (about 1 us), on torch's current
    # stream; a torch without DLPack's C exchange API (before 2.10) takes Kernel.__call__.
    if not kernel._core.forward_exchange(q, k, v, o, lse, softmax_scale, block_counts,
                                         block_indices, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                         max_seqlen_k, None, None, None):
        kernel(q, k, v, out=o, lse=lse, softmax_scale=softmax_scale, block_counts=block_counts,
               block_indices=block_indices, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
               max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)


def _forward_fake(q, k, v, spec, softmax_scale, block_counts, block_indices, cu_seqlens_q,
                  cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    return _forward_outputs(q, v, cu_seqlens_q)


def _backward_outputs(q: Tensor, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    # Gradients laid out as their tensors (empty_like), in the CUDA and the fake implementation.
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _backward_cuda(d_o, q, k, v, o, lse, spec, softmax_scale, block_counts, block_indices,
                   cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    d_q, d_k, d_v = _backward_outputs(q, k, v)
    return _kernel(spec).backward(q, k, v, o, lse, _unit_stride(d_o), d_q=d_q, d_k=d_k, d_v=d_v,
                                  softmax_scale=softmax_scale,
                                  block_counts=block_counts, block_indices=block_indices,
                                  cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                  max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)


def _backward_fake(d_o, q, k, v, o, lse, spec, softmax_scale, block_counts, block_indices,
                   cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    return _backward_outputs(q, k, v)


# What _dispatcher_adds_nothing asks, each a C call of some 40 ns (on a CPU), bound once.
_dispatch_modes = _C._len_torch_dispatch_stack
_function_modes = _C._is_torch_function_mode_enabled
_functorch_active = _C._are_functorch_transforms_active
_tracing_state = _C._get_tracing_state
_profiling = _C._autograd._profiler_enabled
_is_neg = Tensor.is_neg
_excluded = _C._dispatch_tls_is_dispatch_key_excluded
_AUTOGRAD = _C.DispatchKey.AutogradFunctionality  # AutogradCUDA's own bit


def _dispatcher_adds_nothing(tensors) -> bool:
    """Whether torch's dispatcher, handed flashjit::forward or ::backward with these tensor
    arguments (None for an absent optional), would run the op's Autograd and CUDA
    implementations and nothing else, so that calling them directly is the same call. It
    would not while dynamo traces (its graph must get the op), under a TorchDispatchMode
    (FakeTensorMode, FlopCounterMode, ...) or a TorchFunctionMode (torch.device as a context
    among them), a functorch transform (vmap, grad), torch.jit.trace or a profiler (which
    names the op), nor for a tensor that is a subclass (FakeTensor, DTensor, ...), not on a
    CUDA device (the dispatcher would take another device's implementation, or the fake one
    for meta tensors) or has its negative bit set (it would materialise the negation first).
    Autocast adds nothing: it falls through ops without an autocast kernel, as flashjit's
    (tests/python/test_torch_ops.py says so)."""
    if (torch.compiler.is_compiling() or _dispatch_modes() or _function_modes()
            or _functorch_active() or _tracing_state() is not None or _profiling()):
        return False
    for t in tensors:
        if t is not None and (type(t) is not Tensor or not t.is_cuda or _is_neg(t)):
            return False
    return True


def _forward_below_autograd(*args):
    with _C._AutoDispatchBelowAutograd():
        return forward_op(*args)


class _Attention(torch.autograd.Function):
    """flashjit::forward with its gradient through flashjit::backward. `forward_impl` is
    _forward_below_autograd (the op's Autograd implementation) or _forward_cuda (attention()'s
    direct route); `options` are the op's arguments after v, in one tuple: Function.apply
    costs some 130 ns an argument (on a CPU). forward takes ctx rather than a setup_context:
    with one, Function.apply binds its arguments to the signature through inspect on every
    call (12 us on a CPU)."""

    @staticmethod
    def forward(ctx, forward_impl, q, k, v, options):
        o, lse = forward_impl(q, k, v, *options)
        ctx.save_for_backward(q, k, v, o, lse, *options[2:6])  # and block_*, cu_seqlens_*
        ctx.options = options
        # The kernels compute no gradient through LSE (FlashAttention's do not either), and
        # backward wants no zeros for it (materialised, they cost an allocation and a fill).
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)
        return o, lse

    @staticmethod
    def backward(ctx, d_o, _d_lse):
        if d_o is None:  # o had no gradient either
            return None, None, None, None, None
        saved = ctx.saved_tensors
        spec, scale, *_, max_seqlen_q, max_seqlen_k = ctx.options
        args = (d_o, *saved[:5], spec, scale, *saved[5:], max_seqlen_q, max_seqlen_k)
        # The backward op's Autograd implementation, which the dispatcher would run first,
        # redispatches below autograd when grad mode is off (as it is here, but with
        # create_graph=True: then it refuses a second derivative).
        if not _C.is_grad_enabled() and _dispatcher_adds_nothing((d_o, *saved)):
            d_q, d_k, d_v = _backward_cuda(*args)
        else:
            d_q, d_k, d_v = backward_op(*args)
        return None, d_q, d_k, d_v, None


def _forward_autograd(q, k, v, *options):
    """flashjit::forward's Autograd implementation: _Attention where a gradient is wanted,
    else the op below autograd."""
    if _C.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _Attention.apply(_forward_below_autograd, q, k, v, options)
    return _forward_below_autograd(q, k, v, *options)


def _forward_direct(q, k, v, options, want_lse):
    """What the dispatcher runs for flashjit::forward where _dispatcher_adds_nothing: its
    Autograd implementation with the CUDA one in place of the op below autograd (and only
    the CUDA one where a context, as in the op's own Autograd implementation, excludes
    autograd's keys). Without a gradient and unless want_lse, lse is None (not computed)."""
    if (_C.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
            and not _excluded(_AUTOGRAD)):
        return _Attention.apply(_forward_cuda, q, k, v, options)
    if not want_lse:
        return _forward_o_only(q, k, v, *options), None
    return _forward_cuda(q, k, v, *options)


def _no_double_backward(ctx, *grads):
    raise NotImplementedError("flashjit::backward has no derivative: flashjit's kernels give "
                              "first derivatives only (no double backward)")


_lib.impl("forward", _forward_cuda, "CUDA")
_lib.impl("forward", _forward_autograd, "Autograd")
torch.library.register_fake("flashjit::forward", _forward_fake, lib=_lib)
_lib.impl("backward", _backward_cuda, "CUDA")
torch.library.register_fake("flashjit::backward", _backward_fake, lib=_lib)
torch.library.register_autograd("flashjit::backward", _no_double_backward, lib=_lib)


def spec_text(dtype: torch.dtype, head_dim_qk: int, head_dim_v: int, causal: bool = False,
              window: Optional[Tuple[int, int]] = None, deterministic: bool = False) -> str:
    """The YAML of the spec attention() builds. Written here as text, not through the C++
    library, so that torch.compile traces it without a graph break; the ops' kernels parse
    (and validate) it."""
    if dtype not in (torch.float16, torch.bfloat16):
        raise _core.ShapeError(f"flashjit.torch: dtype {dtype}; flashjit's kernels take "
                               "torch.float16 or torch.bfloat16")
    text = (f"head_dim_qk: {head_dim_qk}\nhead_dim_v: {head_dim_v}\n"
            f"dtype: {'fp16' if dtype == torch.float16 else 'bf16'}\n"
            f"causal: {'true' if causal else 'false'}\n"
            f"backward: {{deterministic: {'true' if deterministic else 'false'}}}\n")
    if window is not None:
        text += f"mask: {{sliding_window: {{left: {window[0]}, right: {window[1]}}}}}\n"
    return text


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
              window: Optional[Tuple[int, int]] = None, softmax_scale: Optional[float] = None,
              deterministic: bool = False, return_lse: bool = False,
              kernel: Optional[Kernel] = None, block_counts: Optional[Tensor] = None,
              block_indices: Optional[Tensor] = None, cu_seqlens_q: Optional[Tensor] = None,
              cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: int = 0,
              max_seqlen_k: int = 0) -> Any:
    """Differentiable attention of CUDA tensors in FlashAttention's layout, q [batch,
    seqlen_q, heads_q, head_dim_qk], k/v [batch, seqlen_k, heads_kv, head_dim] (float16 or
    bfloat16; GQA when heads_kv divides heads_q): returns o [batch, seqlen_q, heads_q,
    head_dim_v], with return_lse also lse [batch, heads_q, seqlen_q] float32, which carries
    no gradient. Through the flashjit::forward op, so torch.compile keeps it in its graph, and
    its gradient through flashjit::backward.

    causal is bottom-right aligned (query i sees key j when j <= i + seqlen_k - seqlen_q);
    window=(left, right) is the sliding window of configs/README.md; deterministic=True asks
    the spec for a deterministic backward, bitwise the same every run (without it, on sm_90a,
    dQ may differ in its last bits: the dK/dV kernel adds it up in fp32 in any order).
    kernel: a flashjit.Kernel of any spec (made outside a compiled region), which then replaces
    causal, window and deterministic; block_counts / block_indices are its block_sparse
    layout; cu_seqlens_* / max_seqlen_* a varlen batch (see flashjit.Kernel).
    """
    if kernel is not None:
        spec = kernel.spec_yaml
    else:
        spec = spec_text(q.dtype, q.shape[-1], v.shape[-1], causal, window, deterministic)
    options = (spec, softmax_scale or 0.0, block_counts, block_indices, cu_seqlens_q,
               cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    # Where the dispatcher would add nothing (eager mode, plain CUDA tensors, no mode,
    # transform, tracer or profiler), its implementations are called here, sparing it two calls
    # into Python; otherwise the op, which torch.compile keeps as one node of its graph.
    if _dispatcher_adds_nothing((q, k, v, block_counts, block_indices, cu_seqlens_q,
                                 cu_seqlens_k)):
        o, lse = _forward_direct(q, k, v, options, return_lse)
    else:
        o, lse = forward_op(q, k, v, *options)
    return (o, lse) if return_lse else o


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Optional[Tensor] = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> Tensor:
    """torch.nn.functional.scaled_dot_product_attention's arguments and layout (query [batch,
    heads, seqlen_q, dim], key/value [batch, heads_kv, seqlen_k, dim], float16 or bfloat16
    CUDA tensors) on flashjit's kernels, so a model switches with one line. The tensors are
    passed as strided views (no copy unless the last dimension is strided); the result is a
    [batch, heads, seqlen_q, dim_v] view of a [batch, seqlen_q, heads, dim_v] tensor.

    Refused with UsageError, as no flashjit kernel does it: attn_mask tensors (use
    attention() with a causal, sliding-window or block-sparse spec), dropout_p > 0, heads_kv
    != heads without enable_gqa (as SDPA refuses it), and is_causal with seqlen_q != seqlen_k:
    SDPA's is_causal is top-left aligned and flashjit's causal bottom-right; they agree only
    when seqlen_q == seqlen_k (use attention(causal=True) for the bottom-right mask).
    """
    if attn_mask is not None:
        raise _core.UsageError("flashjit.torch.scaled_dot_product_attention: attn_mask tensors "
                               "are not supported; express the mask as a spec (causal, "
                               "sliding_window, block_sparse) and call flashjit.torch.attention")
    if dropout_p != 0.0:
        raise _core.UsageError(f"flashjit.torch.scaled_dot_product_attention: dropout_p = "
                               f"{dropout_p}; flashjit's kernels have no dropout")
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise _core.UsageError(f"flashjit.torch.scaled_dot_product_attention: {query.shape[1]} "
                               f"query heads and {key.shape[1]} key heads need enable_gqa=True")
    if is_causal and query.shape[2] != key.shape[2]:
        raise _core.UsageError(
            f"flashjit.torch.scaled_dot_product_attention: is_causal with seqlen_q = "
            f"{query.shape[2]} != seqlen_k = {key.shape[2]}: SDPA's causal mask is top-left "
            "aligned, flashjit's bottom-right; use flashjit.torch.attention(causal=True) for the "
            "bottom-right mask")
    q, k, v = (_unit_stride(t.transpose(1, 2)) for t in (query, key, value))
    return attention(q, k, v, causal=is_causal, softmax_scale=scale).transpose(1, 2)
