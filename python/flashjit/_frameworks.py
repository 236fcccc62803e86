"""What flashjit takes from the caller's array framework: streams and output allocation.

PyTorch is used only when the caller already imported it (flashjit never imports it itself):
a torch tensor's outputs are allocated with torch on its device, and its calls go on torch's
current stream of that device. Other DLPack arrays (CuPy, JAX, ...) pass their outputs in and
name their stream.
"""
from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

from ._core import UsageError


def torch_or_none():
    """The torch module if the process imported it, else None."""
    return sys.modules.get("torch")


def is_torch_tensor(x: Any) -> bool:
    torch = torch_or_none()
    return torch is not None and isinstance(x, torch.Tensor)


def dlpack_view(x: Any) -> Any:
    """What to hand the extension for `x`. A torch tensor goes as its DLPack capsule from
    torch.utils.dlpack.to_dlpack, which adds no stream synchronisation: torch's __dlpack__()
    without a stream makes the legacy default stream wait on the current one, an event per
    tensor that costs microseconds and is illegal while a CUDA graph is being captured.
    flashjit launches on the current stream (or the stream= given), so the order is the
    caller's stream order either way. Tensors that require grad are detached (flashjit only
    reads them; a view, no copy). Other arrays (and None) go as they are."""
    if not is_torch_tensor(x):
        return x
    torch = torch_or_none()
    return torch.utils.dlpack.to_dlpack(x.detach() if x.requires_grad else x)


def stream_handle(stream: Any, like: Any) -> int:
    """The CUstream (as an int) of a call: `stream` if given (an int, a torch.cuda.Stream, a
    cupy Stream, or an object with __cuda_stream__), else torch's current stream when `like`
    is a torch tensor, else 0 (the legacy default stream)."""
    if stream is None:
        if is_torch_tensor(like) and like.is_cuda:
            # The raw handle, read as torch.compile's generated code reads it:
            # torch.cuda.current_stream() builds a Stream object, which costs microseconds.
            return torch_or_none()._C._cuda_getCurrentRawStream(like.device.index)
        return 0
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    for attribute in ("cuda_stream", "ptr", "handle"):
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    raise TypeError(f"flashjit: stream= takes an int (a CUstream), a torch.cuda.Stream or an "
                    f"object with __cuda_stream__, not {type(stream).__name__}")


def empty(like: Any, name: str, shape: Sequence[int], float32: bool = False) -> Any:
    """A new tensor on `like`'s device, of `like`'s dtype (or float32): torch only."""
    torch = torch_or_none()
    if not is_torch_tensor(like):
        raise UsageError(f"flashjit: pass {name}= (flashjit allocates outputs only for torch "
                         f"tensors; this call's tensors are {type(like).__name__})")
    return torch.empty(tuple(shape), dtype=torch.float32 if float32 else like.dtype,
                       device=like.device)


def empty_bytes(like: Any, size: int) -> Any:
    """A new uint8 torch buffer of `size` bytes (at least 1) on `like`'s device."""
    torch = torch_or_none()
    return torch.empty(max(size, 1), dtype=torch.uint8, device=like.device)


def dtype_word(x: Any) -> Optional[str]:
    """The spec's dtype for an array of float16 / bfloat16 elements, else None."""
    name = str(getattr(x, "dtype", "")).replace("torch.", "")
    return {"float16": "fp16", "bfloat16": "bf16"}.get(name)
