"""flashjit.torch on the GPU: the ops pass torch.library.opcheck, autograd through them gives
the fp64 reference's gradients (the double-precision check of the autograd wiring), eagerly
and compiled, torch.compile(fullgraph=True) keeps them with no graph break, and a CUDA graph
of forward and backward replays equal to eager."""
import pytest

import flashjit

torch = pytest.importorskip("torch", reason="torch is not installed: the GPU tests use it")
if not torch.cuda.is_available() or not flashjit.has_device():
    pytest.skip("no CUDA GPU: tests/python/test_gpu_*.py run on the GPU machine",
                allow_module_level=True)

import flashjit.torch as fjt  # noqa: E402
import gpu_reference as ref  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


def tensors(b, sq, sk, hq, hkv, d, dtype=torch.bfloat16, grad=True, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda *s: torch.randn(*s, device="cuda", dtype=dtype, generator=g).requires_grad_(grad)
    return make(b, sq, hq, d), make(b, sk, hkv, d), make(b, sk, hkv, d)


def test_ops_pass_opcheck():
    q, k, v = tensors(2, 200, 230, 4, 2, 64)
    spec = fjt.spec_text(q.dtype, 64, 64, causal=True)
    torch.library.opcheck(torch.ops.flashjit.forward.default,
                          (q, k, v, spec, 0.0, None, None, None, None, 0, 0))


def test_backward_op_passes_opcheck_on_sdpa_style_strided_views():
    # [batch, heads, seqlen, dim] tensors seen as [batch, seqlen, heads, dim]: the gradients
    # must come back in the strides the fake implementation promises (those of q, k, v).
    q, k, v = (t.detach().transpose(1, 2).contiguous().transpose(1, 2)
               for t in tensors(2, 300, 300, 4, 2, 64))
    spec = fjt.spec_text(q.dtype, 64, 64, causal=True)
    o, lse = torch.ops.flashjit.forward(q, k, v, spec, 0.0, None, None, None, None, 0, 0)
    torch.library.opcheck(torch.ops.flashjit.backward.default,
                          (torch.randn_like(o), q, k, v, o, lse, spec, 0.0, None, None, None,
                           None, 0, 0), test_utils=("test_schema", "test_faketensor"))


def test_autograd_gives_the_fp64_gradients_of_a_random_loss():
    # What it checks: that the op's autograd formula routes each gradient to its input
    # (GQA summed, causal, scale), by comparing torch.autograd through flashjit.torch with
    # autograd through the float64 reference for the loss sum(W * o), W random.
    q, k, v = tensors(2, 1000, 1037, 8, 2, 100)
    weights = torch.randn(2, 1000, 8, 100, device="cuda", dtype=torch.float64)
    o = fjt.attention(q, k, v, causal=True, softmax_scale=0.1)
    (o.double() * weights).sum().backward()
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o_ref, _ = ref.attention(*exact, causal=True, scale=0.1)
    (o_ref * weights).sum().backward()
    low = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o_low, _ = ref.attention(*low, causal=True, scale=0.1, dtype=q.dtype)
    (o_low * weights.to(q.dtype)).sum().backward()
    ref.assert_close("o", o, o_ref, o_low)
    for name, got, e, l in zip("qkv", (q, k, v), exact, low):
        ref.assert_close(f"d_{name}", got.grad, e.grad, l.grad)


def test_the_op_called_directly_gives_attentions_results_and_gradients():
    # attention() calls the ops' implementations itself in eager mode, a direct call of the
    # op goes through the dispatcher (its gradient then too takes the implementation directly):
    # the routes launch the same kernels (deterministic: bitwise the same).
    q, k, v = tensors(2, 300, 333, 4, 2, 64)
    d_o = torch.randn(2, 300, 4, 64, device="cuda", dtype=q.dtype)
    o, lse = fjt.attention(q, k, v, causal=True, deterministic=True, return_lse=True)
    o.backward(d_o)
    grads = [t.grad for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    spec = fjt.spec_text(q.dtype, 64, 64, causal=True, deterministic=True)
    o_op, lse_op = torch.ops.flashjit.forward(q, k, v, spec, 0.0, None, None, None, None, 0, 0)
    o_op.backward(d_o)
    assert torch.equal(o_op, o) and torch.equal(lse_op, lse)
    for name, expected, t in zip("qkv", grads, (q, k, v)):
        assert torch.equal(t.grad, expected), f"d_{name} through the op differs from attention()'s"
    with torch.no_grad():
        assert torch.equal(fjt.attention(q, k, v, causal=True, deterministic=True), o)


class _PassThrough(TorchDispatchMode):
    """Sees every op and runs it: attention() then takes the op, and its backward too."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("autocast", [False, True])
def test_eager_direct_route_and_the_op_route_are_bitwise_equal(monkeypatch, autocast):
    # Under autocast both routes get the tensors as they are (its keys fall through the ops).
    calls = []
    for name in ("_forward_cuda", "_backward_cuda"):
        impl = getattr(fjt, name)
        monkeypatch.setattr(fjt, name, lambda *args, impl=impl, name=name: calls.append(name) or impl(*args))
    q, k, v = tensors(2, 300, 333, 4, 2, 64)
    d_o = torch.randn(2, 300, 4, 64, device="cuda", dtype=q.dtype)

    def step():
        for t in (q, k, v):
            t.grad = None
        with torch.autocast("cuda", dtype=torch.float16, enabled=autocast):
            o, lse = fjt.attention(q, k, v, causal=True, deterministic=True, return_lse=True)
        o.backward(d_o)
        return o, lse, q.grad, k.grad, v.grad

    direct = step()
    assert calls == ["_forward_cuda", "_backward_cuda"]
    with _PassThrough():
        through_op = step()
    assert calls == ["_forward_cuda", "_backward_cuda"], "the op route called the module's names"
    assert direct[0].dtype == torch.bfloat16
    for name, a, b in zip(("o", "lse", "d_q", "d_k", "d_v"), direct, through_op):
        assert torch.equal(a, b), f"{name} of the direct route differs from the op's"


def test_a_negative_view_is_resolved_as_the_op_resolves_it():
    q, k, v = tensors(1, 200, 200, 2, 2, 64, grad=False)
    assert torch.equal(fjt.attention(torch._neg_view(q), k, v), fjt.attention(-q, k, v))


def test_sdpa_entry_point_matches_torch_sdpa():
    query, key, value = (t.detach().transpose(1, 2).contiguous().requires_grad_()
                         for t in tensors(2, 1037, 1037, 12, 4, 40, grad=False))
    o = fjt.scaled_dot_product_attention(query, key, value, is_causal=True, enable_gqa=True)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query.double(), key.double(), value.double(), is_causal=True, enable_gqa=True)
    lowp, _ = ref.attention(*(t.transpose(1, 2) for t in (query, key, value)), causal=True,
                            dtype=query.dtype)
    assert o.shape == expected.shape
    ref.assert_close("o", o, expected, lowp.transpose(1, 2))
    o.sum().backward()
    assert query.grad.shape == query.shape and torch.isfinite(query.grad).all()


def attention_block(q, k, v):
    o = fjt.attention(q, k, v, causal=True)
    s = fjt.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         is_causal=True, enable_gqa=True)
    return o + s.transpose(1, 2)


def test_torch_compile_fullgraph_has_no_graph_break_and_the_fp64_gradients():
    q, k, v = tensors(2, 512, 512, 8, 2, 64)
    explanation = torch._dynamo.explain(attention_block)(q, k, v)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    compiled = torch.compile(attention_block, fullgraph=True)
    out = compiled(q, k, v)
    # Close, not equal: inductor may hand the ops other strides, hence another kernel variant.
    torch.testing.assert_close(out, attention_block(q, k, v))
    # The compiled backward (AOTAutograd's graph of flashjit::backward) against the fp64
    # reference: attention_block is twice the causal attention (seqlen_q == seqlen_k).
    weights = torch.randn(2, 512, 8, 64, device="cuda", dtype=torch.float64)
    (out.double() * weights).sum().backward()
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    (2 * ref.attention(*exact, causal=True)[0] * weights).sum().backward()
    low = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    (2 * ref.attention(*low, causal=True, dtype=q.dtype)[0] * weights.to(q.dtype)).sum().backward()
    for name, got, e, l in zip("qkv", (q, k, v), exact, low):
        ref.assert_close(f"d_{name}", got.grad, e.grad, l.grad)


def test_cuda_graph_replays_forward_and_backward_equal_to_eager():
    q, k, v = tensors(2, 1000, 1000, 8, 2, 128)
    d_o = torch.randn(2, 1000, 8, 128, device="cuda", dtype=torch.bfloat16)

    def step():
        for t in (q, k, v):
            t.grad = None
        with torch.no_grad():  # inference's route: the op below autograd
            inference = fjt.attention(q, k, v, causal=True)
        o = fjt.attention(q, k, v, causal=True)
        o.backward(d_o)
        return inference, o, q.grad, k.grad, v.grad

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: compiles and loads the kernels
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    with torch.no_grad():
        for t in (q, k, v, d_o):
            t.copy_(torch.randn_like(t))
    graph.replay()
    torch.cuda.synchronize()
    replayed = [t.clone() for t in captured]
    eager = step()
    for name, a, b in zip(("o without grad", "o", "d_q", "d_k", "d_v"), replayed, eager):
        assert torch.equal(a, b), f"{name} of the replay differs from eager"
