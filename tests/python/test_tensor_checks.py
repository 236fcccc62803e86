"""The checks a call's tensors pass before anything runs: CPU arrays (NumPy) are refused with
a clear ShapeError, and CUDA arrays (fake ones: DLPack producers that claim cuda:0) are
checked for dtype, extents and strides against the spec."""
import numpy as np
import pytest

import flashjit
from fake_cuda import FakeCudaArray

B, SQ, SK, HQ, HKV, D = 2, 100, 120, 8, 2, 64


@pytest.fixture(scope="module")
def kern():
    return flashjit.kernel({"head_dim": D, "dtype": "fp16"})


def cuda(shape, dtype="float16", **kw):
    return FakeCudaArray(shape, dtype, **kw)


def qkvo(d_v=D):
    return (cuda((B, SQ, HQ, D)), cuda((B, SK, HKV, D)), cuda((B, SK, HKV, d_v)),
            cuda((B, SQ, HQ, d_v)))


def test_numpy_arrays_are_refused_as_cpu_memory(kern):
    q = np.zeros((B, SQ, HQ, D), np.float16)
    k = np.zeros((B, SK, HKV, D), np.float16)
    with pytest.raises(flashjit.ShapeError, match=r"q is in CPU memory.*CUDA"):
        kern(q, k, k, out=np.zeros_like(q))


def test_numpy_outputs_are_not_allocated(kern):
    q = np.zeros((B, SQ, HQ, D), np.float16)
    with pytest.raises(flashjit.UsageError, match="pass out="):
        kern(q, q, q)


def test_attention_refuses_float32_before_building_a_spec():
    q = np.zeros((B, SQ, HQ, D), np.float32)
    with pytest.raises(flashjit.ShapeError, match="float16 or bfloat16"):
        flashjit.attention(q, q, q, out=q)


def test_one_cpu_tensor_among_cuda_ones_is_named(kern):
    q, k, v, o = qkvo()
    with pytest.raises(flashjit.ShapeError, match="v is in CPU memory"):
        kern(q, k, np.zeros((B, SK, HKV, D), np.float16), out=o)


def test_valid_cuda_tensors_reach_the_runtime_which_needs_a_gpu(kern):
    if flashjit.has_device():
        pytest.skip("this machine has a GPU: the fake tensors would be launched on")
    q, k, v, o = qkvo()
    with pytest.raises(flashjit.NoDeviceError, match="Compiling needs no GPU"):
        kern(q, k, v, out=o)
    assert kern.reports() == []  # the failed call left no kernel behind


@pytest.mark.parametrize("name, bad, match", [
    ("q", cuda((B, SQ, HQ, D), "bfloat16"), r"q is bfloat16 but must be float16"),
    ("k", cuda((B, SK, HKV, D + 1)), r"k has shape \[2, 120, 2, 65\] but must be"),
    ("v", cuda((B, SK + 1, HKV, D)), r"v has shape .* \[2, 120, 2, 64\]"),
    ("o", cuda((B, SQ, HQ)), r"o has shape \[2, 100, 8\]"),
    ("q", cuda((B, SQ, HQ, D), strides=(SQ * HQ * D * 2, HQ * D * 2, D * 2, 2)),
     r"last \(head dim\) stride must be 1"),
])
def test_a_tensor_that_does_not_fit_is_named(kern, name, bad, match):
    tensors = dict(zip("qkvo", qkvo()))
    tensors[name] = bad
    with pytest.raises(flashjit.ShapeError, match=match):
        kern(tensors["q"], tensors["k"], tensors["v"], out=tensors["o"])


def test_tensors_on_two_gpus_are_refused(kern):
    q, k, v, o = qkvo()
    with pytest.raises(flashjit.ShapeError, match="k is on cuda:1"):
        kern(q, FakeCudaArray((B, SK, HKV, D), device=1), v, out=o)


def test_lse_must_be_float32_and_of_the_layout(kern):
    q, k, v, o = qkvo()
    with pytest.raises(flashjit.ShapeError, match="lse is float16 but must be float32"):
        kern(q, k, v, out=o, lse=cuda((B, HQ, SQ)))
    with pytest.raises(flashjit.ShapeError, match=r"lse has shape \[2, 100, 8\]"):
        kern(q, k, v, out=o, lse=cuda((B, SQ, HQ), "float32"))


def test_varlen_calls_need_both_prefix_sums_and_the_longest_lengths(kern):
    q, k = cuda((300, HQ, D)), cuda((350, HKV, D))
    o = cuda((300, HQ, D))
    cu = cuda((3,), "int32")
    with pytest.raises(flashjit.ShapeError, match="give both or neither"):
        kern(q, k, k, out=o, cu_seqlens_q=cu)
    with pytest.raises(flashjit.ShapeError, match="max_seqlen_q and max_seqlen_k"):
        kern(q, k, k, out=o, cu_seqlens_q=cu, cu_seqlens_k=cuda((3,), "int32"))
    with pytest.raises(flashjit.ShapeError, match="cu_seqlens_k has shape"):
        kern(q, k, k, out=o, cu_seqlens_q=cu, cu_seqlens_k=cuda((4,), "int32"),
             max_seqlen_q=200, max_seqlen_k=200)
    with pytest.raises(flashjit.ShapeError, match=r"lse has shape \[300, 8\]"):
        kern(q, k, k, out=o, lse=cuda((300, HQ), "float32"), cu_seqlens_q=cu,
             cu_seqlens_k=cuda((3,), "int32"), max_seqlen_q=200, max_seqlen_k=200)


def test_block_layouts_are_int32_and_agree():
    kern = flashjit.kernel({"head_dim": D, "dtype": "fp16",
                            "mask": {"block_sparse": {"block_q": 128, "block_k": 128}}})
    q, k, v, o = qkvo()
    with pytest.raises(flashjit.ShapeError, match="give both or neither"):
        kern(q, k, v, out=o, block_counts=cuda((1, 1, 1), "int32"))
    with pytest.raises(flashjit.ShapeError, match="block_counts is float16 but must be int32"):
        kern(q, k, v, out=o, block_counts=cuda((1, 1, 1)), block_indices=cuda((1, 1, 1, 1), "int32"))
    with pytest.raises(flashjit.ShapeError, match="block_indices has shape"):
        kern(q, k, v, out=o, block_counts=cuda((1, 1, 1), "int32"),
             block_indices=cuda((1, 2, 1, 1), "int32"))


def test_backward_gradients_have_their_tensors_shapes(kern):
    q, k, v, o = qkvo()
    lse = cuda((B, HQ, SQ), "float32")
    with pytest.raises(flashjit.ShapeError, match="d_k has shape .* must have k's shape"):
        kern.backward(q, k, v, o, lse, cuda(o.shape), d_q=cuda(q.shape), d_k=cuda(q.shape),
                      d_v=cuda(v.shape))
    with pytest.raises(flashjit.ShapeError, match="d_o is bfloat16"):
        kern.backward(q, k, v, o, lse, cuda(o.shape, "bfloat16"), d_q=cuda(q.shape),
                      d_k=cuda(k.shape), d_v=cuda(v.shape))


def test_block_layout_from_dense_gives_int32_numpy_arrays():
    visible = np.array([[[[1, 0, 1], [0, 1, 0]]]], np.uint8)  # 1 batch, 1 head, 2 x 3 blocks
    counts, indices = flashjit.block_layout_from_dense(visible)
    assert counts.dtype == np.int32 and counts.tolist() == [[[2, 1]]]
    assert indices.shape == (1, 1, 2, 2)  # max_blocks: the largest count
    assert indices[0, 0, 0, :2].tolist() == [0, 2] and indices[0, 0, 1, 0] == 1


def test_attention_builds_its_spec_from_the_arrays_and_the_arguments():
    q, k, v, o = qkvo()
    with pytest.raises(flashjit.SpecError, match="right"):
        flashjit.attention(q, k, v, out=o, causal=True, window=(128, 16))  # causal hides the right
    if not flashjit.has_device():
        with pytest.raises(flashjit.NoDeviceError):
            flashjit.attention(q, k, v, out=o, window=(128, 0))


def test_kv_cache_arguments_are_int32_and_fit_the_call(kern):
    q, o = cuda((B, 1, HQ, D)), cuda((B, 1, HQ, D))
    k = cuda((B, 500, HKV, D))
    with pytest.raises(flashjit.ShapeError, match=r"cache_seqlens has shape \[3\] but must be \[batch\]"):
        kern(q, k, k, out=o, cache_seqlens=cuda((B + 1,), "int32"))
    with pytest.raises(flashjit.ShapeError, match="cache_seqlens is float32 but must be int32"):
        kern(q, k, k, out=o, cache_seqlens=cuda((B,), "float32"))
    pages = cuda((7, 16, HKV, D))  # a paged cache: [num_pages, page_size, heads_kv, dim]
    with pytest.raises(flashjit.ShapeError, match=r"block_table has shape \[3, 4\]"):
        kern(q, pages, pages, out=o, block_table=cuda((B + 1, 4), "int32"))
    with pytest.raises(flashjit.ShapeError, match="block_table is float32 but must be int32"):
        kern(q, pages, pages, out=o, block_table=cuda((B, 4), "float32"))
    with pytest.raises(flashjit.ShapeError, match=r"v has shape \[7, 16, 2, 32\] but must be "
                                                   r"\[num_pages, page_size, heads_kv, head_dim_v\]"):
        kern(q, pages, cuda((7, 16, HKV, 32)), out=o, block_table=cuda((B, 4), "int32"))
    varlen_q = cuda((300, HQ, D))
    with pytest.raises(flashjit.ShapeError, match="not served with cu_seqlens"):
        kern(varlen_q, cuda((350, HKV, D)), cuda((350, HKV, D)), out=cuda((300, HQ, D)),
             cu_seqlens_q=cuda((3,), "int32"), cu_seqlens_k=cuda((3,), "int32"),
             max_seqlen_q=200, max_seqlen_k=200, cache_seqlens=cuda((B,), "int32"))
