"""flashjit.Kernel: one spec's kernel called on DLPack tensors."""
from __future__ import annotations

import sys
from typing import Any, Optional, Tuple, Union

from . import _core
from ._frameworks import dlpack_view, empty, empty_bytes, is_torch_tensor, stream_handle
from ._spec import SpecSource, spec as make_spec


class Kernel:
    """The kernel of one spec, compiled on first use (or by compile()) for the GPU of the
    tensors it is called with.

    Tensors are any DLPack CUDA arrays (torch, CuPy, JAX, ...) in FlashAttention's layout:
    q [batch, seqlen_q, heads_q, head_dim_qk], k [batch, seqlen_k, heads_kv, head_dim_qk],
    v [batch, seqlen_k, heads_kv, head_dim_v], o [batch, seqlen_q, heads_q, head_dim_v],
    lse [batch, heads_q, seqlen_q] float32 contiguous; the spec's dtype; any strides with a
    head-dim stride of 1; heads_q a multiple of heads_kv (GQA). With cu_seqlens (varlen) q, k,
    v, o are packed [total, heads, dim] and lse is [heads_q, total_q]. Causal masks, windows
    and block patterns are the spec's; a block_sparse spec takes its layout with each call.
    A tensor that does not fit (a CPU array, another dtype, a wrong extent) raises ShapeError
    before anything runs.
    """

    def __init__(self, source: SpecSource):
        self._core = _core.Kernel(make_spec(source))
        #: The resolved spec as YAML text (flashjit.torch's ops take it, as a constant).
        self.spec_yaml: str = self.spec.to_yaml()
        # Read once: each read of self.spec copies the C++ Spec into a new Python object.
        self._head_dim_v: int = self.spec.head_dim_v

    @property
    def spec(self) -> _core.Spec:
        return self._core.spec

    def __repr__(self) -> str:
        return f"<flashjit.Kernel {self.spec.name}>"

    def compile(self, target: Optional[str] = None, *, device: int = 0,
                backward: bool = False) -> list:
        """Compiles (or loads from the bundles or the disk cache) now, and returns one compile
        report dict per kernel: its "cache_hit" says whether it came from a cache (True) or
        from NVRTC (False, with "compile_ms"). `target` ("sm_80", "sm_86", "sm_89", "sm_90a")
        needs no GPU; without one, GPU `device`'s own target is compiled (NoDeviceError without
        a GPU). backward=True adds the backward's three kernels.

        What is compiled is the variant for 16-byte aligned tensors with the spec's tiles (or
        the heuristic's); the first call still loads it onto the GPU, and compiles another
        variant if its tensors need one (other alignment, a tuned tiling). So make one call
        before capturing a CUDA graph.
        """
        return self._core.compile(device, target, backward)

    def reports(self) -> list:
        """The compile report of every variant loaded by calls so far."""
        return self._core.reports()

    def __call__(self, q: Any, k: Any, v: Any, *, out: Any = None, lse: Any = None,
                 return_lse: bool = False, softmax_scale: Optional[float] = None,
                 block_counts: Any = None, block_indices: Any = None,
                 cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
                 max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
                 cache_seqlens: Any = None, block_table: Any = None,
                 stream: Any = None) -> Union[Any, Tuple[Any, Any]]:
        """The forward pass: returns o, or (o, lse) when return_lse or lse= is given.

        out / lse: tensors to write (allocated with torch when the inputs are torch tensors
        and these are not given; other frameworks must pass out, and lse with return_lse).
        LSE (natural log, scale applied) is written only when asked for. softmax_scale: None
        for 1/sqrt(head_dim_qk). block_counts [LB, LH, q_blocks] / block_indices [LB, LH,
        q_blocks, max_blocks]: int32 CUDA arrays, a block_sparse spec's layout
        (flashjit.block_layout_from_dense makes one). cu_seqlens_q / cu_seqlens_k: int32
        [batch + 1] prefix sums of a varlen batch, with max_seqlen_q / max_seqlen_k the longest
        lengths. cache_seqlens: int32 [batch], the keys each sequence's KV cache holds (the
        new rows are its last; causal and windows are aligned to its own length).
        block_table: int32 [batch, max_pages], a paged cache's pages in order; k and v are then
        [num_pages, page_size, heads_kv, dim] and key j of sequence b is row j % page_size of
        page block_table[b][j // page_size]. Either runs the decode kernels (README, Decode),
        as do few query rows against many keys. stream: see flashjit.attention.
        """
        # The common case costs what the launch does, so this path avoids Python-level helpers:
        # torch tensors go to the extension as they are, read through DLPack's C exchange API,
        # and outputs of a plain torch.Tensor are allocated by new_empty with the extents as
        # separate ints, torch's cheapest form. Every other case reaches the same checks.
        torch = sys.modules.get("torch")
        is_torch = torch is not None and isinstance(q, torch.Tensor)
        plain_torch = is_torch and type(q) is torch.Tensor
        varlen = cu_seqlens_q is not None
        if out is None:
            if plain_torch:
                out = q.new_empty(*q.shape[:-1], self._head_dim_v)
            else:
                out = empty(q, "out", tuple(q.shape[:-1]) + (self._head_dim_v,))
        if lse is None and return_lse:
            shape = q.shape
            heads_and_rows = (shape[1], shape[0]) if varlen else (shape[0], shape[2], shape[1])
            if plain_torch:
                lse = q.new_empty(*heads_and_rows, dtype=torch.float32)
            else:
                lse = empty(q, "lse", heads_and_rows, float32=True)
        # None: the extension asks torch for its current stream, as stream_handle would.
        if stream is None:
            stream_arg = None if is_torch else 0
        else:
            stream_arg = stream_handle(stream, q)
        if not self._core.forward_exchange(
                q, k, v, out, lse, softmax_scale or 0.0, block_counts, block_indices,
                cu_seqlens_q, cu_seqlens_k, max_seqlen_q or 0, max_seqlen_k or 0, cache_seqlens,
                block_table, stream_arg):
            # Arrays without the exchange API (or a torch without it): DLPack capsules.
            self._core.forward(
                *map(dlpack_view, (q, k, v, out, lse)), softmax_scale=softmax_scale or 0.0,
                block_counts=dlpack_view(block_counts), block_indices=dlpack_view(block_indices),
                cu_seqlens_q=dlpack_view(cu_seqlens_q), cu_seqlens_k=dlpack_view(cu_seqlens_k),
                max_seqlen_q=max_seqlen_q or 0, max_seqlen_k=max_seqlen_k or 0,
                cache_seqlens=dlpack_view(cache_seqlens), block_table=dlpack_view(block_table),
                stream=stream_handle(stream, q) if stream_arg is None else stream_arg)
        return (out, lse) if lse is not None else out

    def backward(self, q: Any, k: Any, v: Any, o: Any, lse: Any, d_o: Any, *,
                 d_q: Any = None, d_k: Any = None, d_v: Any = None,
                 softmax_scale: Optional[float] = None, block_counts: Any = None,
                 block_indices: Any = None, cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
                 max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
                 workspace: Any = None, stream: Any = None) -> Tuple[Any, Any, Any]:
        """The backward pass: returns (d_q, d_k, d_v), the gradients of q, k, v in their
        layouts (d_k, d_v summed over each GQA group), every element written.

        q, k, v, o, lse: as the forward had and wrote them (lse is required; the same
        softmax_scale, block layout and cu_seqlens). d_o: the gradient of o. d_q / d_k / d_v:
        tensors to write, allocated like the forward's outputs when not given. workspace: a
        contiguous CUDA buffer of at least backward_workspace_bytes(...) bytes; for torch
        tensors it is taken from torch's allocator when not given (so CUDA graphs and
        torch.cuda.max_memory_allocated see it), otherwise the runtime takes it from the GPU's
        stream-ordered pool. Bitwise the same on every run and stream when the spec sets
        backward.deterministic; without it, on sm_90a, dQ may differ in its last bits (the
        dK/dV kernel adds it up in fp32 in any order).
        """
        d_q = empty(q, "d_q", q.shape) if d_q is None else d_q
        d_k = empty(k, "d_k", k.shape) if d_k is None else d_k
        d_v = empty(v, "d_v", v.shape) if d_v is None else d_v
        options = dict(softmax_scale=softmax_scale or 0.0, block_counts=block_counts,
                       block_indices=block_indices, cu_seqlens_q=cu_seqlens_q,
                       cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q or 0,
                       max_seqlen_k=max_seqlen_k or 0)
        if workspace is None and is_torch_tensor(q):
            size = self.backward_workspace_bytes(q, k, v, o, lse, d_o, d_q, d_k, d_v, **options)
            workspace = empty_bytes(q, size)
        self._core.backward(*_exported(q, k, v, o, lse, d_o, d_q, d_k, d_v), **_exported_options(options),
                            workspace=dlpack_view(workspace), stream=stream_handle(stream, q))
        return d_q, d_k, d_v

    def backward_workspace_bytes(self, q: Any, k: Any, v: Any, o: Any, lse: Any, d_o: Any,
                                 d_q: Any, d_k: Any, d_v: Any, **options: Any) -> int:
        """Bytes of workspace backward() needs for these tensors and options (softmax_scale,
        the block layout, cu_seqlens: as backward() takes them), 256-byte aligned."""
        return self._core.backward_workspace_bytes(*_exported(q, k, v, o, lse, d_o, d_q, d_k, d_v),
                                                   **_exported_options(options))


def _exported(*tensors: Any) -> list:
    return [dlpack_view(t) for t in tensors]


def _exported_options(options: dict) -> dict:
    """Keyword arguments with their tensors (block layout, cu_seqlens) exported."""
    return {name: dlpack_view(value) for name, value in options.items()}


def kernel(source: SpecSource) -> Kernel:
    """The Kernel of a spec given as a dict, YAML text, a path or a Spec (see flashjit.spec).
    Nothing is compiled until compile() or the first call."""
    return Kernel(source)
