"""flashjit's C++ library; use the flashjit package, which wraps it."""

from typing import Annotated

import numpy
from numpy.typing import NDArray

from flashjit import (
    CacheError as CacheError,
    CompileError as CompileError,
    DriverError as DriverError,
    Error as Error,
    IoError as IoError,
    NoDeviceError as NoDeviceError,
    ShapeError as ShapeError,
    SpecError as SpecError,
    UsageError as UsageError
)


class Spec:
    """
    A validated kernel spec (configs/README.md has every field). Make one with Spec.from_yaml / Spec.from_file or flashjit.spec(dict | text | path).
    """

    @staticmethod
    def from_yaml(text: str, source: str = '<string>') -> Spec:
        """
        Parses and validates YAML text; `source` names it in error messages (SpecError: source:line:column and the field).
        """

    @staticmethod
    def from_file(path: str) -> Spec:
        """
        Reads, parses and validates a YAML file (IoError if it cannot be read).
        """

    def validate(self) -> None:
        """Raises SpecError naming the field out of range."""

    def to_yaml(self) -> str:
        """
        The resolved spec as YAML, every field present (what `flashjit check` prints).
        """

    def __repr__(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def head_dim_qk(self) -> int: ...

    @property
    def head_dim_v(self) -> int: ...

    @property
    def dtype(self) -> str:
        """"fp16" or "bf16\""""

    @property
    def causal(self) -> bool: ...

    @property
    def mask(self) -> str:
        """"none", "sliding_window", "block_sparse" or "pattern\""""

    @property
    def window_left(self) -> int: ...

    @property
    def window_right(self) -> int: ...

    @property
    def block_q(self) -> int: ...

    @property
    def block_k(self) -> int: ...

    @property
    def arch(self) -> str:
        """"auto", "sm80" or "sm90a\""""

    @property
    def warp_specialization(self) -> bool: ...

    @property
    def deterministic(self) -> bool: ...

class Kernel:
    """
    The C++ kernel of one spec (flashjit::Kernel) on every GPU it is called on; flashjit.Kernel wraps it with output allocation and streams.
    """

    def __init__(self, spec: Spec) -> None: ...

    @property
    def spec(self) -> Spec: ...

    def forward(self, q: Annotated[NDArray, dict(writable=False)], k: Annotated[NDArray, dict(writable=False)], v: Annotated[NDArray, dict(writable=False)], o: NDArray, lse: NDArray | None = None, *, softmax_scale: float = 0.0, block_counts: Annotated[NDArray, dict(writable=False)] | None = None, block_indices: Annotated[NDArray, dict(writable=False)] | None = None, cu_seqlens_q: Annotated[NDArray, dict(writable=False)] | None = None, cu_seqlens_k: Annotated[NDArray, dict(writable=False)] | None = None, max_seqlen_q: int = 0, max_seqlen_k: int = 0, cache_seqlens: Annotated[NDArray, dict(writable=False)] | None = None, block_table: Annotated[NDArray, dict(writable=False)] | None = None, stream: int = 0) -> None:
        """
        Kernel::forward on `stream` (a CUstream as an integer, 0: the default stream) with the tensors' device, dtype, shapes and strides checked against the spec; a KV cache (cache_seqlens, block_table) runs decode.
        """

    def forward_exchange(self, q: object | None, k: object | None, v: object | None, o: object | None, lse: object | None, softmax_scale: object | None, block_counts: object | None, block_indices: object | None, cu_seqlens_q: object | None, cu_seqlens_k: object | None, max_seqlen_q: object | None, max_seqlen_k: object | None, cache_seqlens: object | None, block_table: object | None, stream: object | None) -> bool:
        """
        forward() on tensors read through their type's DLPack C exchange API (__dlpack_c_exchange_api__, e.g. torch.Tensor's), forward()'s arguments all positional, with stream None for the framework's current stream on q's GPU. Returns False, having run nothing, where a tensor has no such API (or another framework's) or a number does not convert: then call forward() with DLPack capsules.
        """

    def backward(self, q: Annotated[NDArray, dict(writable=False)], k: Annotated[NDArray, dict(writable=False)], v: Annotated[NDArray, dict(writable=False)], o: Annotated[NDArray, dict(writable=False)], lse: Annotated[NDArray, dict(writable=False)], d_o: Annotated[NDArray, dict(writable=False)], d_q: NDArray, d_k: NDArray, d_v: NDArray, *, softmax_scale: float = 0.0, block_counts: Annotated[NDArray, dict(writable=False)] | None = None, block_indices: Annotated[NDArray, dict(writable=False)] | None = None, cu_seqlens_q: Annotated[NDArray, dict(writable=False)] | None = None, cu_seqlens_k: Annotated[NDArray, dict(writable=False)] | None = None, max_seqlen_q: int = 0, max_seqlen_k: int = 0, workspace: NDArray | None = None, stream: int = 0) -> None:
        """
        Kernel::backward: d_q, d_k, d_v from the forward's q, k, v, o, lse and d_o; without a workspace the runtime takes one from the GPU's stream-ordered pool.
        """

    def backward_workspace_bytes(self, q: Annotated[NDArray, dict(writable=False)], k: Annotated[NDArray, dict(writable=False)], v: Annotated[NDArray, dict(writable=False)], o: Annotated[NDArray, dict(writable=False)], lse: Annotated[NDArray, dict(writable=False)], d_o: Annotated[NDArray, dict(writable=False)], d_q: NDArray, d_k: NDArray, d_v: NDArray, *, softmax_scale: float = 0.0, block_counts: Annotated[NDArray, dict(writable=False)] | None = None, block_indices: Annotated[NDArray, dict(writable=False)] | None = None, cu_seqlens_q: Annotated[NDArray, dict(writable=False)] | None = None, cu_seqlens_k: Annotated[NDArray, dict(writable=False)] | None = None, max_seqlen_q: int = 0, max_seqlen_k: int = 0) -> int:
        """
        Bytes of workspace backward() needs for these arguments (256-byte aligned).
        """

    def compile(self, device: int = 0, target: str | None = None, backward: bool = False) -> list:
        """
        Runtime::compile now (Runtime::compile_backward too with backward=True) for `target`, else GPU `device`'s own; returns the compile reports as dicts.
        """

    def reports(self) -> list:
        """
        Kernel::reports of every GPU this kernel ran on: one dict per variant loaded.
        """

def version() -> str:
    """The generator version (part of every cache key)."""

def compile_only(spec: Spec, target: str) -> dict:
    """Runtime::compile: the forward for `target`, no GPU needed."""

def compile_backward_only(spec: Spec, target: str) -> list:
    """Runtime::compile_backward: the backward's kernels, in launch order."""

def register_bundle_file(path: str) -> None:
    """
    Registers a bundle file (flashjit build); IoError if corrupt, UsageError if of another generator version.
    """

def register_bundle(data: bytes, name: str) -> None:
    """Registers a bundle held in memory; `name` names it in messages."""

def has_device(device: int = 0) -> bool:
    """
    True when a CUDA driver and GPU `device` are present (takes no GPU memory).
    """

def device_info(device: int = 0) -> dict:
    """GPU `device`'s name, compute capability, SM count and driver version."""

def environment() -> dict:
    """
    The FLASHJIT_* settings as the library reads them now, defaults resolved.
    """

def block_layout_from_dense(visible: Annotated[NDArray[numpy.uint8], dict(shape=(None, None, None, None), order='C', device='cpu', writable=False)]) -> tuple:
    """
    flashjit::block_layout_from_dense of a [batch, heads, q_blocks, k_blocks] uint8 host array: (block_counts, block_indices) as int32 NumPy arrays.
    """
