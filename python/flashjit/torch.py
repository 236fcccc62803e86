"""flashjit's kernels as PyTorch operators: torch.library custom ops (``flashjit::forward``,
``flashjit::backward``) with fake implementations, so torch.compile(fullgraph=True) keeps them
in its graph and CUDA graphs capture them, and an autograd formula that runs the backward
kernels.

    import flashjit.torch as fjt
    o = fjt.attention(q, k, v, causal=True)                     # [batch, seqlen, heads, dim]
    o = fjt.scaled_dot_product_attention(q, k, v, is_causal=True)  # SDPA's [batch, heads, seqlen, dim]

A kernel compiles on its first call: make one call (or Kernel.compile()) before capturing a
CUDA graph. The ops take the spec as YAML text, a constant that torch.compile folds into the
graph; their implementations keep one flashjit.Kernel per spec text.
"""
import atexit
import functools
from typing import Any, Optional, Tuple

import torch

from . import _core
from ._kernel import Kernel

Tensor = torch.Tensor


@functools.lru_cache(maxsize=None)
def _kernel(spec_yaml: str) -> Kernel:
    return Kernel(spec_yaml)


atexit.register(_kernel.cache_clear)  # as flashjit._attention's cache


def _unit_stride(t: Optional[Tensor]) -> Optional[Tensor]:
    """`t`, or a contiguous copy where the kernels cannot read it: a head-dim stride other
    than 1, or a broadcast (stride 0) dimension, as the gradient of a sum() has."""
    if t is None or (t.stride(-1) == 1 and all(s != 0 or n == 1 for s, n in zip(t.stride(), t.shape))):
        return t
    return t.contiguous()


@torch.library.custom_op("flashjit::forward", mutates_args=(), device_types="cuda")
def forward_op(q: Tensor, k: Tensor, v: Tensor, spec: str, softmax_scale: float,
               block_counts: Optional[Tensor], block_indices: Optional[Tensor],
               cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
               max_seqlen_q: int, max_seqlen_k: int) -> Tuple[Tensor, Tensor]:
    """The forward of the kernel of `spec` (YAML text): (o, lse) as flashjit.Kernel returns."""
    return _kernel(spec)(q, k, v, return_lse=True, softmax_scale=softmax_scale,
                         block_counts=block_counts, block_indices=block_indices,
                         cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                         max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)


@forward_op.register_fake
def _forward_fake(q, k, v, spec, softmax_scale, block_counts, block_indices, cu_seqlens_q,
                  cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    o = q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))
    if cu_seqlens_q is not None:  # packed [total_q, heads_q, dim]: lse [heads_q, total_q]
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    else:
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return o, lse


@torch.library.custom_op("flashjit::backward", mutates_args=(), device_types="cuda")
def backward_op(d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, spec: str,
                softmax_scale: float, block_counts: Optional[Tensor],
                block_indices: Optional[Tensor], cu_seqlens_q: Optional[Tensor],
                cu_seqlens_k: Optional[Tensor], max_seqlen_q: int,
                max_seqlen_k: int) -> Tuple[Tensor, Tensor, Tensor]:
    """The backward of the kernel of `spec`: (d_q, d_k, d_v) as flashjit.Kernel.backward."""
    # Gradients laid out as their tensors (empty_like), as the fake implementation says.
    return _kernel(spec).backward(q, k, v, o, lse, _unit_stride(d_o), d_q=torch.empty_like(q),
                                  d_k=torch.empty_like(k), d_v=torch.empty_like(v),
                                  softmax_scale=softmax_scale,
                                  block_counts=block_counts, block_indices=block_indices,
                                  cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                  max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)


@backward_op.register_fake
def _backward_fake(d_o, q, k, v, o, lse, spec, softmax_scale, block_counts, block_indices,
                   cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    (q, k, v, spec, scale, block_counts, block_indices, cu_seqlens_q, cu_seqlens_k,
     max_seqlen_q, max_seqlen_k) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, block_counts, block_indices, cu_seqlens_q, cu_seqlens_k)
    ctx.spec, ctx.scale, ctx.max_seqlens = spec, scale, (max_seqlen_q, max_seqlen_k)
    # The kernels compute no gradient through LSE (FlashAttention's do not either).
    ctx.mark_non_differentiable(lse)


def _backward(ctx, d_o, _d_lse):
    q, k, v, o, lse, block_counts, block_indices, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    d_q, d_k, d_v = backward_op(d_o, q, k, v, o, lse, ctx.spec, ctx.scale, block_counts,
                                block_indices, cu_seqlens_q, cu_seqlens_k, *ctx.max_seqlens)
    return d_q, d_k, d_v, None, None, None, None, None, None, None, None


forward_op.register_autograd(_backward, setup_context=_setup_context)


def spec_text(dtype: torch.dtype, head_dim_qk: int, head_dim_v: int, causal: bool = False,
              window: Optional[Tuple[int, int]] = None, deterministic: bool = False) -> str:
    """The YAML of the spec attention() builds. Written here as text, not through the C++
    library, so that torch.compile traces it without a graph break; the ops' kernels parse
    (and validate) it."""
    if dtype not in (torch.float16, torch.bfloat16):
        raise _core.ShapeError(f"flashjit.torch: dtype {dtype}; flashjit's kernels take "
                               "torch.float16 or torch.bfloat16")
    lines = [f"head_dim_qk: {head_dim_qk}", f"head_dim_v: {head_dim_v}",
             f"dtype: {'fp16' if dtype == torch.float16 else 'bf16'}",
             f"causal: {'true' if causal else 'false'}",
             f"backward: {{deterministic: {'true' if deterministic else 'false'}}}"]
    if window is not None:
        lines.append(f"mask: {{sliding_window: {{left: {window[0]}, right: {window[1]}}}}}")
    return "\n".join(lines) + "\n"


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
    o, lse = forward_op(q, k, v, spec, softmax_scale or 0.0, block_counts, block_indices,
                        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
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
