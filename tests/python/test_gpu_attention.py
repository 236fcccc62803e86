"""Forward and backward through the package on the GPU against the fp64 reference
(gpu_reference.py states FlashAttention's rule), on shapes that fit no tile: seqlens 1000 /
1037, head dims 100, 40 and (192, 128), GQA and MQA, causal, a sliding window, varlen."""
import itertools

import numpy as np
import pytest

import flashjit

torch = pytest.importorskip("torch", reason="torch is not installed: the GPU tests use it")
if not torch.cuda.is_available() or not flashjit.has_device():
    pytest.skip("no CUDA GPU: tests/python/test_gpu_*.py run on the GPU machine",
                allow_module_level=True)

import gpu_reference as ref  # noqa: E402

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim_qk, head_dim_v, dtype, causal, window)
SHAPES = [
    (2, 1000, 1037, 8, 2, 100, 100, torch.bfloat16, False, None),
    (2, 1000, 1037, 8, 8, 128, 128, torch.bfloat16, True, None),
    (1, 1037, 1037, 4, 1, 192, 128, torch.float16, True, None),
    (2, 1000, 1037, 6, 3, 64, 64, torch.bfloat16, False, (256, 0)),
    (2, 1037, 1037, 12, 12, 40, 40, torch.float16, True, None),
]


def ids(shape):
    b, sq, sk, hq, hkv, dqk, dv, dtype, causal, window = shape
    return (f"b{b}_q{sq}_k{sk}_h{hq}/{hkv}_d{dqk}/{dv}_{str(dtype)[6:]}"
            f"{'_causal' if causal else ''}{f'_w{window[0]}' if window else ''}")


def inputs(shape, grad=False):
    b, sq, sk, hq, hkv, dqk, dv, dtype, _, _ = shape
    g = torch.Generator(device="cuda").manual_seed(sq * 131 + dqk)
    make = lambda *s: torch.randn(*s, device="cuda", dtype=dtype, generator=g).requires_grad_(grad)
    return make(b, sq, hq, dqk), make(b, sk, hkv, dqk), make(b, sk, hkv, dv)


def kernel_of(shape, deterministic=False):
    _, _, _, _, _, dqk, dv, dtype, causal, window = shape
    spec = {"head_dim_qk": dqk, "head_dim_v": dv, "causal": causal,
            "dtype": "fp16" if dtype == torch.float16 else "bf16",
            "backward": {"deterministic": deterministic}}
    if window:
        spec["mask"] = {"sliding_window": {"left": window[0], "right": window[1]}}
    return flashjit.kernel(spec)


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_forward_against_fp64(shape):
    causal, window = shape[8], shape[9]
    q, k, v = inputs(shape)
    o, lse = kernel_of(shape)(q, k, v, return_lse=True)
    o_ref, lse_ref = ref.attention(q, k, v, causal, window)
    o_low, _ = ref.attention(q, k, v, causal, window, dtype=q.dtype)
    ref.assert_close("o", o, o_ref, o_low)
    assert (lse.double() - lse_ref).abs().max().item() < 1e-3, "lse"


def test_attention_builds_the_spec_from_the_tensors():
    shape = SHAPES[3]
    q, k, v = inputs(shape)
    o = flashjit.attention(q, k, v, window=shape[9])
    o_ref, _ = ref.attention(q, k, v, window=shape[9])
    o_low, _ = ref.attention(q, k, v, window=shape[9], dtype=q.dtype)
    ref.assert_close("o", o, o_ref, o_low)


def test_rows_that_see_no_key_give_zero_and_minus_infinity():
    shape = (1, 1000, 700, 4, 4, 64, 64, torch.bfloat16, True, None)  # bottom-right: 300 rows see nothing
    q, k, v = inputs(shape)
    o, lse = kernel_of(shape)(q, k, v, return_lse=True)
    assert torch.all(o[:, :300] == 0) and torch.all(lse[:, :, :300] == float("-inf"))
    o_ref, _ = ref.attention(q, k, v, causal=True)
    o_low, _ = ref.attention(q, k, v, causal=True, dtype=q.dtype)
    ref.assert_close("o", o, o_ref, o_low)


def test_outputs_passed_in_and_a_stream():
    shape = SHAPES[0]
    q, k, v = inputs(shape)
    out = torch.full_like(q, float("nan"))
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # q, k, v were made on the current stream
    with torch.cuda.stream(stream):  # the current stream is used without stream=
        got, got_lse = kernel_of(shape)(q, k, v, out=out, lse=lse)
    stream.synchronize()
    assert got is out and got_lse is lse and not torch.isnan(out).any()
    again = kernel_of(shape)(q, k, v, stream=stream)
    stream.synchronize()
    assert torch.equal(again, out)


def test_varlen_batch_matches_each_sequence():
    seqlens_q, seqlens_k = [300, 517, 183], [300, 600, 200]
    shape = (1, 0, 0, 8, 2, 100, 100, torch.bfloat16, True, None)
    kern = kernel_of(shape)
    g = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(sum(seqlens_q), 8, 100, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(sum(seqlens_k), 2, 100, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn_like(k)
    prefix = lambda n: torch.tensor([0, *itertools.accumulate(n)], dtype=torch.int32, device="cuda")
    o = kern(q, k, v, cu_seqlens_q=prefix(seqlens_q), cu_seqlens_k=prefix(seqlens_k),
             max_seqlen_q=max(seqlens_q), max_seqlen_k=max(seqlens_k))
    rq = rk = 0
    for sq, sk in zip(seqlens_q, seqlens_k):
        one = lambda t, r, n: t[r:r + n][None]
        o_ref, _ = ref.attention(one(q, rq, sq), one(k, rk, sk), one(v, rk, sk), causal=True)
        o_low, _ = ref.attention(one(q, rq, sq), one(k, rk, sk), one(v, rk, sk), causal=True, dtype=q.dtype)
        ref.assert_close(f"o of sequence {sq}x{sk}", o[rq:rq + sq][None], o_ref, o_low)
        rq, rk = rq + sq, rk + sk


def test_block_sparse_layout_from_dense_blocks():
    sq, sk, block = 1000, 1037, 128
    q_blocks, k_blocks = -(-sq // block), -(-sk // block)
    rng = np.random.default_rng(3)
    dense = (rng.random((1, 1, q_blocks, k_blocks)) < 0.5).astype(np.uint8)
    dense[..., 0] = 1  # every query block sees at least one key block
    counts, indices = flashjit.block_layout_from_dense(dense)
    kern = flashjit.kernel({"head_dim": 64, "dtype": "bf16",
                            "mask": {"block_sparse": {"block_q": block, "block_k": block}}})
    q, k, v = inputs((2, sq, sk, 4, 2, 64, 64, torch.bfloat16, False, None))
    o = kern(q, k, v, block_counts=torch.from_numpy(counts).cuda(),
             block_indices=torch.from_numpy(indices).cuda())
    seen = torch.from_numpy(dense[0, 0].astype(bool)).cuda()
    seen = seen.repeat_interleave(block, 0)[:sq].repeat_interleave(block, 1)[:, :sk]
    o_ref, _ = ref.attention(q, k, v, seen=seen)
    o_low, _ = ref.attention(q, k, v, seen=seen, dtype=q.dtype)
    ref.assert_close("o", o, o_ref, o_low)


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_backward_against_fp64(shape):
    causal, window = shape[8], shape[9]
    q, k, v = inputs(shape)
    kern = kernel_of(shape)
    o, lse = kern(q, k, v, return_lse=True)
    d_o = torch.randn_like(o)
    d_q, d_k, d_v = kern.backward(q, k, v, o, lse, d_o)
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o_ref, _ = ref.attention(*exact, causal, window)
    grads_ref = torch.autograd.grad(o_ref, exact, d_o.double())
    low = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o_low, _ = ref.attention(*low, causal, window, dtype=q.dtype)
    grads_low = torch.autograd.grad(o_low, low, d_o)
    for name, got, r, l in zip(("d_q", "d_k", "d_v"), (d_q, d_k, d_v), grads_ref, grads_low):
        ref.assert_close(name, got, r, l)
    # dK and dV are each summed in a fixed order on every path; dQ too unless the spec leaves
    # backward.deterministic false, which lets sm_90a add dQ up in fp32 in any order.
    again = kern.backward(q, k, v, o, lse, d_o)
    assert torch.equal(again[1], d_k) and torch.equal(again[2], d_v), "dK/dV not deterministic"


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_deterministic_backward_is_bitwise_stable(shape):
    q, k, v = inputs(shape)
    kern = kernel_of(shape, deterministic=True)
    o, lse = kern(q, k, v, return_lse=True)
    d_o = torch.randn_like(o)
    first = kern.backward(q, k, v, o, lse, d_o)
    for _ in range(2):
        again = kern.backward(q, k, v, o, lse, d_o)
        assert all(torch.equal(a, b) for a, b in zip(again, first)), "not bitwise stable"


def test_compile_says_cache_or_nvrtc_and_the_call_reuses_it():
    kern = flashjit.kernel({"head_dim": 72, "dtype": "bf16"})
    reports = kern.compile(backward=True)
    assert len(reports) == 4 and all(isinstance(r["cache_hit"], bool) for r in reports)
    again = kern.compile()
    assert again[0]["cache_hit"]
    q, k, v = inputs((1, 256, 256, 4, 4, 72, 72, torch.bfloat16, False, None))
    kern(q, k, v)
    assert [r["kernel_name"] for r in kern.reports()] == [reports[0]["kernel_name"]]
