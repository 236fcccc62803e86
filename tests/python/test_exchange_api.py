"""Arrays whose type has DLPack's C exchange API (__dlpack_c_exchange_api__, as torch.Tensor
has from torch 2.10) are read by the extension's forward_exchange, with no DLPack capsule:
it must raise exactly what the capsule path raises for the same arrays, and fall back to
capsules wherever it cannot read a tensor. Fake CUDA arrays of both kinds (fake_cuda.py) stand
in for GPU tensors; the torch tests use CPU tensors and a stubbed extension."""
import pytest

import flashjit
from fake_cuda import FakeCudaArray, exchange_framework

B, SQ, SK, HQ, HKV, D = 2, 100, 120, 8, 2, 64
Exchange = exchange_framework()


@pytest.fixture(scope="module")
def kern():
    return flashjit.kernel({"head_dim": D, "dtype": "fp16"})


@pytest.fixture(scope="module")
def sparse_kern():
    return flashjit.kernel({"head_dim": D, "dtype": "fp16",
                            "mask": {"block_sparse": {"block_q": 128, "block_k": 128}}})


def outcome(call):
    try:
        call()
    except TypeError as error:  # its message ends with the arrays' type names, which differ
        return TypeError, str(error).splitlines()[0]
    except Exception as error:  # noqa: BLE001 (the outcome is compared, whatever it is)
        return type(error), str(error)
    return None


# Each case makes its arrays with `cuda` (a FakeCudaArray or Exchange factory) and calls.
CASES = {
    "dtype": lambda kern, cuda: kern(cuda((B, SQ, HQ, D), "bfloat16"), cuda((B, SK, HKV, D)),
                                     cuda((B, SK, HKV, D)), out=cuda((B, SQ, HQ, D))),
    "k extent": lambda kern, cuda: kern(cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D + 1)),
                                        cuda((B, SK, HKV, D)), out=cuda((B, SQ, HQ, D))),
    "v rows": lambda kern, cuda: kern(cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D)),
                                      cuda((B, SK + 1, HKV, D)), out=cuda((B, SQ, HQ, D))),
    "o rank": lambda kern, cuda: kern(cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D)),
                                      cuda((B, SK, HKV, D)), out=cuda((B, SQ, HQ))),
    "head-dim stride": lambda kern, cuda: kern(
        cuda((B, SQ, HQ, D), strides=(SQ * HQ * D * 2, HQ * D * 2, D * 2, 2)),
        cuda((B, SK, HKV, D)), cuda((B, SK, HKV, D)), out=cuda((B, SQ, HQ, D))),
    "two GPUs": lambda kern, cuda: kern(cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D), device=1),
                                        cuda((B, SK, HKV, D)), out=cuda((B, SQ, HQ, D))),
    "lse dtype": lambda kern, cuda: kern(cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D)),
                                         cuda((B, SK, HKV, D)), out=cuda((B, SQ, HQ, D)),
                                         lse=cuda((B, HQ, SQ))),
    "lse layout": lambda kern, cuda: kern(cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D)),
                                          cuda((B, SK, HKV, D)), out=cuda((B, SQ, HQ, D)),
                                          lse=cuda((B, SQ, HQ), "float32")),
    "one prefix sum": lambda kern, cuda: kern(cuda((300, HQ, D)), cuda((350, HKV, D)),
                                              cuda((350, HKV, D)), out=cuda((300, HQ, D)),
                                              cu_seqlens_q=cuda((3,), "int32")),
    "no longest lengths": lambda kern, cuda: kern(
        cuda((300, HQ, D)), cuda((350, HKV, D)), cuda((350, HKV, D)), out=cuda((300, HQ, D)),
        cu_seqlens_q=cuda((3,), "int32"), cu_seqlens_k=cuda((3,), "int32")),
    "prefix sums disagree": lambda kern, cuda: kern(
        cuda((300, HQ, D)), cuda((350, HKV, D)), cuda((350, HKV, D)), out=cuda((300, HQ, D)),
        cu_seqlens_q=cuda((3,), "int32"), cu_seqlens_k=cuda((4,), "int32"),
        max_seqlen_q=200, max_seqlen_k=200),
    "varlen lse": lambda kern, cuda: kern(
        cuda((300, HQ, D)), cuda((350, HKV, D)), cuda((350, HKV, D)), out=cuda((300, HQ, D)),
        lse=cuda((300, HQ), "float32"), cu_seqlens_q=cuda((3,), "int32"),
        cu_seqlens_k=cuda((3,), "int32"), max_seqlen_q=200, max_seqlen_k=200),
    "longest lengths without varlen": lambda kern, cuda: kern(
        cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D)), cuda((B, SK, HKV, D)),
        out=cuda((B, SQ, HQ, D)), max_seqlen_q=200),
    "cache lengths extent": lambda kern, cuda: kern(
        cuda((B, 1, HQ, D)), cuda((B, 500, HKV, D)), cuda((B, 500, HKV, D)),
        out=cuda((B, 1, HQ, D)), cache_seqlens=cuda((B + 1,), "int32")),
    "cache lengths dtype": lambda kern, cuda: kern(
        cuda((B, 1, HQ, D)), cuda((B, 500, HKV, D)), cuda((B, 500, HKV, D)),
        out=cuda((B, 1, HQ, D)), cache_seqlens=cuda((B,), "float32")),
    "block table extent": lambda kern, cuda: kern(
        cuda((B, 1, HQ, D)), cuda((7, 16, HKV, D)), cuda((7, 16, HKV, D)),
        out=cuda((B, 1, HQ, D)), block_table=cuda((B + 1, 4), "int32")),
    "paged v": lambda kern, cuda: kern(
        cuda((B, 1, HQ, D)), cuda((7, 16, HKV, D)), cuda((7, 16, HKV, 32)),
        out=cuda((B, 1, HQ, D)), block_table=cuda((B, 4), "int32")),
    "cache with varlen": lambda kern, cuda: kern(
        cuda((300, HQ, D)), cuda((350, HKV, D)), cuda((350, HKV, D)), out=cuda((300, HQ, D)),
        cu_seqlens_q=cuda((3,), "int32"), cu_seqlens_k=cuda((3,), "int32"),
        max_seqlen_q=200, max_seqlen_k=200, cache_seqlens=cuda((B,), "int32")),
    "scale not a number": lambda kern, cuda: kern(
        cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D)), cuda((B, SK, HKV, D)),
        out=cuda((B, SQ, HQ, D)), softmax_scale="0.125"),
}

SPARSE_CASES = {
    "one layout half": lambda kern, cuda: kern(
        cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D)), cuda((B, SK, HKV, D)),
        out=cuda((B, SQ, HQ, D)), block_counts=cuda((1, 1, 1), "int32")),
    "layout dtype": lambda kern, cuda: kern(
        cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D)), cuda((B, SK, HKV, D)),
        out=cuda((B, SQ, HQ, D)), block_counts=cuda((1, 1, 1)),
        block_indices=cuda((1, 1, 1, 1), "int32")),
    "layouts disagree": lambda kern, cuda: kern(
        cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D)), cuda((B, SK, HKV, D)),
        out=cuda((B, SQ, HQ, D)), block_counts=cuda((1, 1, 1), "int32"),
        block_indices=cuda((1, 2, 1, 1), "int32")),
}


def both_paths(kern, case):
    """The outcome of `case` on capsule-only arrays and on exchange-API arrays, and whether
    the exchange arrays were read without a capsule."""
    made = []

    def exchange(*args, **kw):
        made.append(Exchange(*args, **kw))
        return made[-1]

    described = Exchange.described
    capsule_outcome = outcome(lambda: case(kern, FakeCudaArray))
    exchange_outcome = outcome(lambda: case(kern, exchange))
    read_without_capsules = Exchange.described > described and not any(a.exported() for a in made)
    return capsule_outcome, exchange_outcome, read_without_capsules


@pytest.mark.parametrize("name", CASES)
def test_the_exchange_path_raises_what_the_capsule_path_raises(kern, name):
    capsule_outcome, exchange_outcome, read_without_capsules = both_paths(kern, CASES[name])
    assert capsule_outcome is not None and exchange_outcome == capsule_outcome
    if name == "scale not a number":  # the extension cannot take it: the capsule path's error
        assert capsule_outcome[0] is TypeError
    else:
        assert capsule_outcome[0] is flashjit.ShapeError and read_without_capsules


@pytest.mark.parametrize("name", SPARSE_CASES)
def test_block_layouts_through_the_exchange_path(sparse_kern, name):
    capsule_outcome, exchange_outcome, read_without_capsules = both_paths(sparse_kern,
                                                                          SPARSE_CASES[name])
    assert capsule_outcome[0] is flashjit.ShapeError
    assert exchange_outcome == capsule_outcome and read_without_capsules


def qkvo(cuda):
    return (cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D)), cuda((B, SK, HKV, D)),
            cuda((B, SQ, HQ, D)))


needs_no_gpu = pytest.mark.skipif(
    flashjit.has_device(), reason="this machine has a GPU: the fake tensors would be launched on")


@needs_no_gpu
def test_valid_exchange_arrays_reach_the_runtime_without_capsules(kern):
    arrays = qkvo(Exchange)
    with pytest.raises(flashjit.NoDeviceError):
        kern(*arrays[:3], out=arrays[3])
    assert not any(a.exported() for a in arrays)


@needs_no_gpu
def test_the_current_stream_is_asked_of_the_framework_only_without_a_stream(kern):
    framework = exchange_framework(stream=0xABC)
    q, k, v, o = qkvo(lambda shape: framework(shape, device=3))
    rest = (0.0, None, None, None, None, 0, 0, None, None)
    with pytest.raises(flashjit.NoDeviceError):
        kern._core.forward_exchange(q, k, v, o, None, *rest, None)
    assert framework.stream_queries == [(2, 3)]  # kDLCUDA, q's device
    with pytest.raises(flashjit.NoDeviceError):
        kern._core.forward_exchange(q, k, v, o, None, *rest, 0)
    assert framework.stream_queries == [(2, 3)]


@pytest.mark.parametrize("framework", [exchange_framework(refuse=True),
                                       exchange_framework(strides=False)],
                         ids=["producer refuses", "no strides"])
def test_arrays_the_exchange_api_cannot_read_go_as_capsules(kern, framework):
    q, k, v, o = qkvo(framework)
    bad_k = framework((B, SK, HKV, D + 1))
    assert not kern._core.forward_exchange(q, bad_k, v, o, None, 0.0, None, None, None, None, 0,
                                           0, None, None, 0)
    with pytest.raises(flashjit.ShapeError, match=r"k has shape \[2, 120, 2, 65\]"):
        kern(q, bad_k, v, out=o)
    assert q.exported() == 1 and bad_k.exported() == 1


def test_arrays_of_two_frameworks_or_without_the_api_go_as_capsules(kern):
    other = exchange_framework()
    for k in (other((B, SK, HKV, D + 1)), FakeCudaArray((B, SK, HKV, D + 1))):
        q, _, v, o = qkvo(Exchange)
        assert not kern._core.forward_exchange(q, k, v, o, None, 0.0, None, None, None, None, 0,
                                               0, None, None, 0)
        with pytest.raises(flashjit.ShapeError, match=r"k has shape \[2, 120, 2, 65\]"):
            kern(q, k, v, out=o)
        assert q.exported() == 1


# torch's tensors (CPU ones here): what Kernel.__call__ hands the extension.
class _RecordingCore:
    """Stands in for a Kernel's extension object: records forward_exchange's arguments."""

    def __init__(self, real):
        self.spec, self.calls = real.spec, []

    def forward_exchange(self, *args):
        self.calls.append(args)
        return True


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="torch is not installed")


def recording(kern):
    kernel = flashjit.Kernel(kern.spec)
    kernel._core = _RecordingCore(kernel._core)
    return kernel, kernel._core.calls


def test_torch_outputs_are_allocated_contiguous_in_the_layout(torch):
    kernel, calls = recording(flashjit.kernel({"head_dim_qk": 64, "head_dim_v": 32,
                                               "dtype": "bf16"}))
    q = torch.empty(B, SQ, HQ, 64, dtype=torch.bfloat16).transpose(1, 2).transpose(1, 2)[:, :50]
    k = torch.empty(B, SK, HKV, 64, dtype=torch.bfloat16)
    v = torch.empty(B, SK, HKV, 32, dtype=torch.bfloat16)
    o, lse = kernel(q, k, v, return_lse=True)
    assert (o.shape, o.dtype, o.is_contiguous()) == ((B, 50, HQ, 32), torch.bfloat16, True)
    assert (lse.shape, lse.dtype, lse.is_contiguous()) == ((B, HQ, 50), torch.float32, True)
    assert type(o) is torch.Tensor and not o.requires_grad
    packed = torch.empty(300, HQ, 64, dtype=torch.bfloat16)
    cu = torch.zeros(3, dtype=torch.int32)
    o, lse = kernel(packed, k[0], v[0], return_lse=True, cu_seqlens_q=cu, cu_seqlens_k=cu,
                    max_seqlen_q=200, max_seqlen_k=100)
    assert o.shape == (300, HQ, 32) and lse.shape == (HQ, 300) and lse.dtype == torch.float32
    assert calls[-1][0] is packed and calls[-1][3] is o and calls[-1][4] is lse


def test_torch_subclasses_get_plain_outputs_as_before(torch):
    class Marked(torch.Tensor):
        pass

    kernel, _ = recording(flashjit.kernel({"head_dim": 64, "dtype": "bf16"}))
    q = torch.empty(B, SQ, HQ, 64, dtype=torch.bfloat16).as_subclass(Marked)
    o = kernel(q, q, q)
    assert type(o) is torch.Tensor and o.shape == q.shape


def test_the_stream_handed_to_the_extension(torch):
    kernel, calls = recording(flashjit.kernel({"head_dim": 64, "dtype": "bf16"}))
    q = torch.empty(B, SQ, HQ, 64, dtype=torch.bfloat16)
    kernel(q, q, q)
    assert calls[-1][-1] is None  # torch: the extension asks torch for its current stream

    class Stream:
        def __cuda_stream__(self):
            return (0, 1234)

    kernel(q, q, q, stream=Stream())
    assert calls[-1][-1] == 1234
    kernel(q, q, q, stream=77)
    assert calls[-1][-1] == 77
    fake = qkvo(FakeCudaArray)
    kernel(*fake[:3], out=fake[3])
    assert calls[-1][-1] == 0  # other arrays: the default stream, as before


def test_torch_tensors_are_read_without_capsules(torch, kern, monkeypatch):
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip(f"torch {torch.__version__} has no DLPack exchange API: capsules it is")

    def no_capsules(x):
        raise AssertionError("a DLPack capsule was made")

    monkeypatch.setattr("flashjit._kernel.dlpack_view", no_capsules)
    q = torch.zeros(B, SQ, HQ, D, dtype=torch.float16, requires_grad=True)
    with pytest.raises(flashjit.ShapeError, match="q is in CPU memory"):
        kern(q, q, q)
    with pytest.raises(flashjit.ShapeError, match="q is in CPU memory"):
        kern(q, q, q, out=torch.empty_like(q), return_lse=True)


def test_a_torch_without_the_exchange_api_goes_as_capsules(torch, kern, monkeypatch):
    if hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        monkeypatch.delattr(torch.Tensor, "__dlpack_c_exchange_api__")
    q = torch.zeros(B, SQ, HQ, D, dtype=torch.float16)
    with pytest.raises(flashjit.ShapeError, match="q is in CPU memory"):
        kern(q, q, q)
