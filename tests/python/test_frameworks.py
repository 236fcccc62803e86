"""What the package takes from the caller's framework without a GPU: stream handles in their
several spellings, and which arrays get outputs allocated."""
import numpy as np
import pytest

import flashjit
from flashjit import _frameworks


class TorchLikeStream:
    cuda_stream = 0x1234


class ProtocolStream:
    def __cuda_stream__(self):
        return (0, 0x5678)


def test_stream_handles_in_every_spelling():
    like = np.zeros(1)
    assert _frameworks.stream_handle(None, like) == 0  # not torch: the default stream
    assert _frameworks.stream_handle(42, like) == 42
    assert _frameworks.stream_handle(TorchLikeStream(), like) == 0x1234
    assert _frameworks.stream_handle(ProtocolStream(), like) == 0x5678
    with pytest.raises(TypeError, match="stream="):
        _frameworks.stream_handle("default", like)


def test_outputs_are_allocated_for_torch_tensors_only():
    with pytest.raises(flashjit.UsageError, match="pass lse="):
        _frameworks.empty(np.zeros(1), "lse", (1,), float32=True)


def test_dtype_words_of_the_spec():
    assert _frameworks.dtype_word(np.zeros(1, np.float16)) == "fp16"
    assert _frameworks.dtype_word(np.zeros(1, np.float32)) is None
