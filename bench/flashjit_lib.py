"""ctypes binding of libflashjit_c.so (include/flashjit/flashjit_c.h) for PyTorch tensors.
Only what the benchmark needs: runtimes, kernels from YAML, forward (with a block-sparse
layout when the kernel has one), backward, compile reports."""
from __future__ import annotations

import ctypes
import json
from typing import Callable

# flashjit::ErrorKind + 1, as flashjit_c.h numbers them.
STATUS_NAMES = {1: "spec", 2: "shape", 3: "compile", 4: "driver", 5: "no-device",
                6: "cache", 7: "io", 8: "usage", 9: "internal"}

_Strides = ctypes.c_int64 * 3


class _MaskArgs(ctypes.Structure):
    """flashjit_mask_args of flashjit_c.h."""
    _fields_ = [("block_counts", ctypes.c_void_p), ("block_indices", ctypes.c_void_p),
                ("layout_batch", ctypes.c_int), ("layout_heads", ctypes.c_int),
                ("layout_q_blocks", ctypes.c_int), ("layout_max_blocks", ctypes.c_int),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
                ("total_q", ctypes.c_int), ("total_k", ctypes.c_int)]


class _KvCacheArgs(ctypes.Structure):
    """flashjit_kv_cache_args of flashjit_c.h."""
    _fields_ = [("cache_seqlens", ctypes.c_void_p), ("block_table", ctypes.c_void_p),
                ("page_size", ctypes.c_int), ("max_pages", ctypes.c_int),
                ("num_pages", ctypes.c_int)]


class FlashjitError(RuntimeError):
    def __init__(self, status: int, message: str):
        self.status = status
        self.kind = STATUS_NAMES.get(status, f"status {status}")
        super().__init__(f"flashjit {self.kind} error: {message}")


class Library:
    def __init__(self, path: str):
        lib = ctypes.CDLL(path)
        p, i = ctypes.c_void_p, ctypes.c_int
        lib.flashjit_last_error.restype = ctypes.c_char_p
        lib.flashjit_last_error.argtypes = []
        lib.flashjit_version.restype = ctypes.c_char_p
        lib.flashjit_version.argtypes = []
        lib.flashjit_runtime_create.restype = i
        lib.flashjit_runtime_create.argtypes = [ctypes.POINTER(p)]
        lib.flashjit_runtime_destroy.restype = None
        lib.flashjit_runtime_destroy.argtypes = [p]
        lib.flashjit_kernel_from_yaml.restype = i
        lib.flashjit_kernel_from_yaml.argtypes = [p, ctypes.c_char_p, ctypes.POINTER(p)]
        lib.flashjit_kernel_destroy.restype = None
        lib.flashjit_kernel_destroy.argtypes = [p]
        lib.flashjit_forward.restype = i
        lib.flashjit_forward.argtypes = [p, p, p, p, p, p, i, i, i, i, i,
                                         _Strides, _Strides, _Strides, _Strides,
                                         ctypes.c_float, p]
        lib.flashjit_forward_masked.restype = i
        lib.flashjit_forward_masked.argtypes = [p, p, p, p, p, p, i, i, i, i, i,
                                                _Strides, _Strides, _Strides, _Strides,
                                                ctypes.c_float, ctypes.POINTER(_MaskArgs), p]
        grads = [p, p, p, p, p, p, p, p, p, i, i, i, i, i] + [_Strides] * 8 + \
            [ctypes.c_float, ctypes.POINTER(_MaskArgs)]
        lib.flashjit_backward.restype = i
        lib.flashjit_backward.argtypes = [p] + grads + [p, ctypes.c_size_t, p]
        lib.flashjit_backward_workspace_bytes.restype = i
        lib.flashjit_backward_workspace_bytes.argtypes = [p] + grads + [
            ctypes.POINTER(ctypes.c_size_t)]
        kv_cache = [p, p, p, p, p, p, i, i, i, i, i, _Strides, _Strides, _Strides, _Strides,
                    ctypes.c_float, ctypes.POINTER(_KvCacheArgs)]
        lib.flashjit_forward_kv_cache.restype = i
        lib.flashjit_forward_kv_cache.argtypes = kv_cache + [p, ctypes.c_size_t, p]
        lib.flashjit_forward_workspace_bytes.restype = i
        lib.flashjit_forward_workspace_bytes.argtypes = kv_cache + [
            ctypes.POINTER(ctypes.c_size_t)]
        lib.flashjit_kernel_report_json.restype = ctypes.c_char_p
        lib.flashjit_kernel_report_json.argtypes = [p]
        self.c = lib
        self.path = path

    def version(self) -> str:
        return self.c.flashjit_version().decode()

    def check(self, status: int) -> None:
        if status != 0:
            raise FlashjitError(status, self.c.flashjit_last_error().decode(errors="replace"))


class Kernel:
    def __init__(self, lib: Library, handle: ctypes.c_void_p):
        self._lib = lib
        self._handle = handle

    def close(self) -> None:
        if self._handle:
            self._lib.c.flashjit_kernel_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def launcher(self, q, k, v, o, lse, softmax_scale: float, stream: int,
                 layout=None) -> Callable[[], None]:
        """A call that launches the forward on these tensors (torch layout [batch, seqlen,
        heads, dim], flashjit's own). The ctypes arguments are built once, so that timing a
        launch measures the launch, not Python argument conversion. `layout`: a block_sparse
        kernel's (counts, indices), contiguous int32 CUDA tensors [LB, LH, nq] and
        [LB, LH, nq, max_blocks] (FlexAttention's kv_num_blocks / kv_indices)."""
        batch, seqlen_q, heads_q, _ = q.shape
        _, seqlen_k, heads_kv, _ = k.shape
        for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
            if t.stride(-1) != 1:
                raise ValueError(f"{name}: the head_dim stride must be 1, got {t.stride()}")
        args = (self._handle, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                lse.data_ptr() if lse is not None else None,
                batch, heads_q, heads_kv, seqlen_q, seqlen_k,
                _Strides(*q.stride()[:3]), _Strides(*k.stride()[:3]),
                _Strides(*v.stride()[:3]), _Strides(*o.stride()[:3]),
                softmax_scale)
        forward, check = self._lib.c.flashjit_forward, self._lib.check
        if layout is not None:
            counts, indices = layout
            for name, t in (("counts", counts), ("indices", indices)):
                if not t.is_contiguous() or t.element_size() != 4 or t.is_floating_point():
                    raise ValueError(f"layout {name}: a contiguous int32 tensor is needed")
            mask = _MaskArgs(counts.data_ptr(), indices.data_ptr(), counts.shape[0],
                             counts.shape[1], counts.shape[2], indices.shape[3], None, None,
                             0, 0)
            args = args + (ctypes.byref(mask),)
            forward = self._lib.c.flashjit_forward_masked
        args = args + (stream,)

        def launch() -> None:
            check(forward(*args))

        return launch

    def kv_cache_launcher(self, q, k, v, o, lse, softmax_scale: float, stream: int,
                          seqlen_k: int, cache_seqlens=None, block_table=None,
                          page_size: int = 0, workspace_factory=None) -> Callable[[], None]:
        """A decode call against a KV cache: k/v dense [batch, seqlen_k, heads_kv, dim] or,
        with `block_table` (int32 [batch, max_pages] CUDA tensor), paged [num_pages,
        page_size, heads_kv, dim]; `cache_seqlens` an int32 [batch] CUDA tensor or None.
        `workspace_factory(bytes)` makes the workspace tensor (None: the runtime's pool)."""
        batch, seqlen_q, heads_q, _ = q.shape
        heads_kv = k.shape[2]
        cache = _KvCacheArgs(cache_seqlens.data_ptr() if cache_seqlens is not None else None,
                             block_table.data_ptr() if block_table is not None else None,
                             page_size if block_table is not None else 0,
                             block_table.shape[1] if block_table is not None else 0,
                             k.shape[0] if block_table is not None else 0)
        args = (self._handle, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                lse.data_ptr() if lse is not None else None,
                batch, heads_q, heads_kv, seqlen_q, seqlen_k,
                _Strides(*q.stride()[:3]), _Strides(*k.stride()[:3]),
                _Strides(*v.stride()[:3]), _Strides(*o.stride()[:3]),
                softmax_scale, ctypes.byref(cache))
        workspace = None
        if workspace_factory is not None:
            size = ctypes.c_size_t()
            self._lib.check(self._lib.c.flashjit_forward_workspace_bytes(
                *args, ctypes.byref(size)))
            workspace = workspace_factory(size.value) if size.value else None
        call = args + (workspace.data_ptr() if workspace is not None else None,
                       workspace.numel() if workspace is not None else 0, stream)
        forward, check = self._lib.c.flashjit_forward_kv_cache, self._lib.check

        def launch() -> None:
            check(forward(*call))

        launch.keep = (cache, workspace)  # alive as long as the launcher
        return launch

    def _backward_args(self, q, k, v, o, lse, d_o, d_q, d_k, d_v, softmax_scale) -> tuple:
        """The arguments flashjit_backward and flashjit_backward_workspace_bytes share (after
        the kernel): tensors in torch layout [batch, seqlen, heads, dim], lse [batch, heads,
        seqlen] fp32, no mask."""
        batch, seqlen_q, heads_q, _ = q.shape
        _, seqlen_k, heads_kv, _ = k.shape
        tensors = (("q", q), ("k", k), ("v", v), ("o", o), ("d_o", d_o), ("d_q", d_q),
                   ("d_k", d_k), ("d_v", d_v))
        for name, t in tensors:
            if t.stride(-1) != 1:
                raise ValueError(f"{name}: the head_dim stride must be 1, got {t.stride()}")
        return (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                d_o.data_ptr(), d_q.data_ptr(), d_k.data_ptr(), d_v.data_ptr(),
                batch, heads_q, heads_kv, seqlen_q, seqlen_k,
                *(_Strides(*t.stride()[:3]) for _, t in tensors),
                softmax_scale, None)

    def backward_workspace_bytes(self, q, k, v, o, lse, d_o, d_q, d_k, d_v,
                                 softmax_scale: float) -> int:
        """Bytes of workspace a backward on these tensors needs (backward_launcher's)."""
        out = ctypes.c_size_t()
        self._lib.check(self._lib.c.flashjit_backward_workspace_bytes(
            self._handle, *self._backward_args(q, k, v, o, lse, d_o, d_q, d_k, d_v,
                                               softmax_scale), ctypes.byref(out)))
        return out.value

    def backward_launcher(self, q, k, v, o, lse, d_o, d_q, d_k, d_v, softmax_scale: float,
                          stream: int, workspace=None) -> Callable[[], None]:
        """A call that launches the backward: q, k, v, o and lse as the forward had and
        wrote them, d_o in, d_q, d_k, d_v written (the layouts of o, q, k, v). `workspace`:
        a CUDA tensor of at least backward_workspace_bytes bytes, or None (the runtime
        allocates). Arguments built once, as launcher's. The launcher holds `workspace`:
        freed before a launch, its memory could go to another tensor in between, and with it
        the counters of the deterministic kernel (a stall of the first-call thread pool)."""
        args = (self._handle,
                *self._backward_args(q, k, v, o, lse, d_o, d_q, d_k, d_v, softmax_scale),
                workspace.data_ptr() if workspace is not None else None,
                workspace.numel() * workspace.element_size() if workspace is not None else 0,
                stream)
        backward, check = self._lib.c.flashjit_backward, self._lib.check

        def launch() -> None:
            check(backward(*args))

        launch.keep = workspace  # alive as long as the launcher
        return launch

    def reports(self) -> dict:
        text = self._lib.c.flashjit_kernel_report_json(self._handle)
        if text is None:
            message = self._lib.c.flashjit_last_error().decode(errors="replace")
            raise RuntimeError(f"flashjit_kernel_report_json failed: {message}")
        return json.loads(text)


class Runtime:
    """Reads FLASHJIT_CACHE_DIR when created: set the environment first."""

    def __init__(self, lib: Library):
        self._lib = lib
        self._handle = ctypes.c_void_p()
        lib.check(lib.c.flashjit_runtime_create(ctypes.byref(self._handle)))

    def close(self) -> None:
        if self._handle:
            self._lib.c.flashjit_runtime_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def kernel(self, spec_yaml: str) -> Kernel:
        handle = ctypes.c_void_p()
        self._lib.check(self._lib.c.flashjit_kernel_from_yaml(
            self._handle, spec_yaml.encode(), ctypes.byref(handle)))
        return Kernel(self._lib, handle)
