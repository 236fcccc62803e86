"""flashjit.attention: a kernel picked from the tensors, no spec to write."""
from __future__ import annotations

import atexit
import functools
from typing import Any, Optional, Tuple, Union

from ._core import ShapeError
from ._frameworks import dtype_word
from ._kernel import Kernel


# The kernels are dropped at exit, before the interpreter tears the extension's types down
# (nanobind reports kernels still alive then as leaks).
@functools.lru_cache(maxsize=None)
def kernel_for(dtype: str, head_dim_qk: int, head_dim_v: int, causal: bool,
               window: Optional[Tuple[int, int]], deterministic: bool) -> Kernel:
    """One Kernel per distinct spec, kept for the process: its compiled variants stay loaded."""
    spec = {"head_dim_qk": head_dim_qk, "head_dim_v": head_dim_v, "dtype": dtype,
            "causal": causal, "backward": {"deterministic": deterministic}}
    if window is not None:
        spec["mask"] = {"sliding_window": {"left": window[0], "right": window[1]}}
    return Kernel(spec)


def attention(q: Any, k: Any, v: Any, *, causal: bool = False,
              window: Optional[Tuple[int, int]] = None, softmax_scale: Optional[float] = None,
              return_lse: bool = False, out: Any = None, lse: Any = None, stream: Any = None,
              cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
              max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None
              ) -> Union[Any, Tuple[Any, Any]]:
    """Attention of DLPack CUDA tensors q [batch, seqlen_q, heads_q, head_dim_qk],
    k [batch, seqlen_k, heads_kv, head_dim_qk], v [batch, seqlen_k, heads_kv, head_dim_v]
    (float16 or bfloat16; any strides with a head-dim stride of 1; GQA when heads_kv divides
    heads_q): returns o [batch, seqlen_q, heads_q, head_dim_v], and with return_lse also lse
    [batch, heads_q, seqlen_q] float32 (log-sum-exp of each score row, natural log).

    The spec comes from the tensors' dtype and head dims and the arguments; its Kernel is made
    once per distinct spec and kept (the first call of each compiles, or loads it from the
    disk cache). causal is bottom-right aligned (FlashAttention >= 2.1): query i sees key j
    when j <= i + seqlen_k - seqlen_q, and a query row that sees no key gives o = 0, lse =
    -inf; equal to top-left alignment only when seqlen_q == seqlen_k. window=(left, right):
    query i sees keys i + d - left .. i + d + right, d = seqlen_k - seqlen_q (right must be 0
    with causal). softmax_scale: None for 1/sqrt(head_dim_qk).

    Outputs: allocated with torch for torch tensors, else pass out= (and lse= with
    return_lse). stream: an int CUstream, a torch.cuda.Stream or an object with
    __cuda_stream__; None is torch's current stream for torch tensors, else the default stream.
    flashjit synchronises no streams: the tensors must be ready in that stream's order.
    cu_seqlens_q / cu_seqlens_k / max_seqlen_q / max_seqlen_k: a varlen batch (see Kernel).
    Raises ShapeError for tensors that do not fit (CPU arrays included), SpecError for
    arguments no spec allows (e.g. a negative window).
    """
    dtype = dtype_word(q)
    if dtype is None:
        raise ShapeError(f"attention: q has dtype {getattr(q, 'dtype', '?')}; flashjit's kernels "
                         "take float16 or bfloat16")
    kernel = kernel_for(dtype, int(q.shape[-1]), int(v.shape[-1]), bool(causal),
                        None if window is None else (int(window[0]), int(window[1])), False)
    return kernel(q, k, v, out=out, lse=lse, return_lse=return_lse, softmax_scale=softmax_scale,
                  cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                  max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, stream=stream)


atexit.register(kernel_for.cache_clear)
