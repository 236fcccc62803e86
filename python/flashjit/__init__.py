"""flashjit: FlashAttention CUDA kernels generated from a short spec, compiled at run time
with NVRTC, cached on disk, launched through the CUDA driver.

    import flashjit
    o, lse = flashjit.attention(q, k, v, causal=True, return_lse=True)    # DLPack CUDA tensors
    kern = flashjit.kernel({"head_dim_qk": 192, "head_dim_v": 128, "dtype": "bf16"})
    kern.compile()                      # now: from a cache or NVRTC (the reports say which)
    o = kern(q, k, v)
    d_q, d_k, d_v = kern.backward(q, k, v, o, lse, d_o)

Layout [batch, seqlen, heads, head_dim] (FlashAttention's); causal is bottom-right aligned.
flashjit.torch adds torch.library ops with autograd and an SDPA-style entry point.
Errors are flashjit.Error subclasses, one per kind: SpecError, ShapeError, CompileError,
DriverError, NoDeviceError, CacheError, IoError, UsageError. Everything but running a kernel
works without a GPU. The FLASHJIT_* environment variables (cache folder, dump folder, verbose
lines, tune DB, NVRTC library) are read by the C++ library: flashjit.environment() shows them.
"""
from ._core import (CacheError, CompileError, DriverError, Error, IoError, NoDeviceError,
                    ShapeError, Spec, SpecError, UsageError, block_layout_from_dense,
                    device_info, environment, has_device, version)
from ._attention import attention
from ._kernel import Kernel, kernel
from ._spec import spec
from ._tools import (build_bundle, cache_dir, compile_backward_only, compile_only,
                     register_bundle, tune, tune_decode)

__version__ = version()

__all__ = [
    "attention", "kernel", "Kernel", "spec", "Spec", "compile_only", "compile_backward_only",
    "build_bundle", "register_bundle", "tune", "tune_decode", "cache_dir", "environment", "has_device",
    "device_info", "block_layout_from_dense", "version",
    "Error", "SpecError", "ShapeError", "CompileError", "DriverError", "NoDeviceError",
    "CacheError", "IoError", "UsageError",
]
