"""flashjit.torch without a GPU: the ops' schemas and fake implementations (run on
meta tensors, as torch.compile's tracing runs them), their autograd wiring, and what the SDPA
entry point refuses. Skipped, with the reason, where torch is not installed."""
import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed: flashjit.torch's tests need it (pip install torch)")

import flashjit  # noqa: E402
import flashjit.torch as fjt  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

B, SQ, SK, HQ, HKV, DQK, DV = 2, 100, 130, 8, 2, 192, 128


def meta(*shape, dtype=torch.bfloat16, grad=False):
    return torch.empty(shape, dtype=dtype, device="meta", requires_grad=grad)


def test_the_ops_are_registered_under_flashjit():
    assert hasattr(torch.ops.flashjit, "forward") and hasattr(torch.ops.flashjit, "backward")


@pytest.mark.parametrize("op", ["flashjit::forward", "flashjit::backward"])
def test_each_op_has_cuda_fake_and_autograd_implementations(op):
    # register_fake's implementation is the Meta kernel; Autograd is the dispatcher's own key,
    # so the op is differentiable when called directly, not only through attention().
    for key in ("CUDA", "Meta", "Autograd"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, key), key
    assert torch.Tag.pt2_compliant_tag in getattr(torch.ops.flashjit, op[10:]).default.tags


def test_spec_text_is_a_spec_the_library_accepts():
    text = fjt.spec_text(torch.float16, 192, 128, causal=True, deterministic=True)
    spec = flashjit.spec(text)
    assert (spec.dtype, spec.head_dim_qk, spec.head_dim_v, spec.causal, spec.deterministic) == (
        "fp16", 192, 128, True, True)
    windowed = flashjit.spec(fjt.spec_text(torch.bfloat16, 64, 64, window=(256, 16)))
    assert (windowed.mask, windowed.window_left, windowed.window_right) == ("sliding_window", 256, 16)


def test_spec_text_refuses_float32():
    with pytest.raises(flashjit.ShapeError, match="float16 or torch.bfloat16"):
        fjt.spec_text(torch.float32, 64, 64)


def test_forward_fake_gives_o_and_lse_shapes():
    o, lse = fjt.attention(meta(B, SQ, HQ, DQK), meta(B, SK, HKV, DQK), meta(B, SK, HKV, DV),
                           causal=True, return_lse=True)
    assert o.shape == (B, SQ, HQ, DV) and o.dtype == torch.bfloat16
    assert lse.shape == (B, HQ, SQ) and lse.dtype == torch.float32


def test_varlen_forward_fake_gives_packed_shapes():
    cu = torch.empty(B + 1, dtype=torch.int32, device="meta")
    o, lse = fjt.attention(meta(300, HQ, DQK), meta(350, HKV, DQK), meta(350, HKV, DV),
                           cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=200, max_seqlen_k=200,
                           return_lse=True)
    assert o.shape == (300, HQ, DV) and lse.shape == (HQ, 300)


def test_autograd_reaches_the_backward_op_with_the_inputs_shapes():
    q, k, v = meta(B, SQ, HQ, DQK, grad=True), meta(B, SK, HKV, DQK, grad=True), meta(B, SK, HKV, DV, grad=True)
    o, lse = fjt.attention(q, k, v, return_lse=True)
    assert not lse.requires_grad  # no gradient flows through LSE
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_the_forward_op_called_directly_is_differentiable():
    q, k, v = meta(B, SQ, HQ, 64, grad=True), meta(B, SK, HKV, 64, grad=True), meta(B, SK, HKV, 64, grad=True)
    spec = fjt.spec_text(q.dtype, 64, 64)
    o, lse = torch.ops.flashjit.forward(q, k, v, spec, 0.0, None, None, None, None, 0, 0)
    assert o.requires_grad and not lse.requires_grad
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    with torch.no_grad():
        assert not torch.ops.flashjit.forward(q, k, v, spec, 0.0, None, None, None, None, 0, 0)[0].requires_grad
        assert not fjt.attention(q, k, v).requires_grad


def test_a_second_derivative_is_refused():
    q, k = meta(B, SQ, HQ, 64, grad=True), meta(B, SK, HKV, 64, grad=True)
    (d_q,) = torch.autograd.grad(fjt.attention(q, k, k).sum(), q, create_graph=True)
    with pytest.raises(NotImplementedError, match="no double backward"):
        d_q.sum().backward()


def test_sdpa_layout_round_trip_on_meta_tensors():
    q, k, v = meta(B, HQ, SQ, DQK), meta(B, HKV, SK, DQK), meta(B, HKV, SK, DV)
    o = fjt.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert o.shape == (B, HQ, SQ, DV)


@pytest.mark.parametrize("kwargs, match", [
    ({"attn_mask": "mask"}, "attn_mask tensors are not supported"),
    ({"dropout_p": 0.1}, "no dropout"),
    ({"is_causal": True}, "top-left"),
])
def test_sdpa_refuses_what_no_kernel_does(kwargs, match):
    q, k, v = meta(B, HKV, SQ, 64), meta(B, HKV, SK, 64), meta(B, HKV, SK, 64)
    if "attn_mask" in kwargs:
        kwargs = {"attn_mask": meta(SQ, SK, dtype=torch.bool)}
    with pytest.raises(flashjit.UsageError, match=match):
        fjt.scaled_dot_product_attention(q, k, v, **kwargs)


def test_sdpa_needs_enable_gqa_for_fewer_key_heads():
    q, k = meta(B, HQ, SQ, 64), meta(B, HKV, SK, 64)
    with pytest.raises(flashjit.UsageError, match="enable_gqa=True"):
        fjt.scaled_dot_product_attention(q, k, k)


def test_a_kernel_of_any_spec_goes_through_the_op():
    kern = flashjit.kernel({"head_dim": 64, "mask": {"pattern": {"kind": "local", "blocks": 1}}})
    o = fjt.attention(meta(B, SQ, HQ, 64), meta(B, SK, HKV, 64), meta(B, SK, HKV, 64), kernel=kern)
    assert o.shape == (B, SQ, HQ, 64)


def test_a_cpu_torch_tensor_is_a_shape_error_not_a_crash():
    q = torch.randn(1, 64, 2, 64, dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(flashjit.ShapeError, match="q is in CPU memory"):
        flashjit.kernel({"head_dim": 64})(q, q, q)  # o is allocated (with torch), then refused
    with pytest.raises(flashjit.ShapeError, match="q is in CPU memory"):
        flashjit.attention(q, q, q)


def test_opcheck_of_the_registration_on_meta_tensors():
    q, k = meta(B, SQ, HQ, 64, grad=True), meta(B, SK, HKV, 64, grad=True)
    spec = fjt.spec_text(q.dtype, 64, 64, causal=True)
    results = torch.library.opcheck(torch.ops.flashjit.forward.default,
                                    (q, k, k, spec, 0.0, None, None, None, None, 0, 0))
    assert set(results.values()) == {"SUCCESS"}, results


def test_opcheck_of_the_backward_op_on_meta_tensors():
    q, k = meta(B, SQ, HQ, 64, grad=True), meta(B, SK, HKV, 64, grad=True)
    lse = torch.empty(B, HQ, SQ, device="meta")
    spec = fjt.spec_text(q.dtype, 64, 64, causal=True)
    results = torch.library.opcheck(torch.ops.flashjit.backward.default,
                                    (meta(B, SQ, HQ, 64), q, k, k, meta(B, SQ, HQ, 64), lse, spec, 0.0,
                                     None, None, None, None, 0, 0))
    assert set(results.values()) == {"SUCCESS"}, results


def attention_block(q, k, v):
    o = fjt.attention(q, k, v, causal=True)
    s = fjt.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         is_causal=True, enable_gqa=True)
    return o + s.transpose(1, 2)


def test_dynamo_traces_both_entry_points_without_a_graph_break():
    q, k = meta(B, SK, HQ, 64, grad=True), meta(B, SK, HKV, 64, grad=True)
    explanation = torch._dynamo.explain(attention_block)(q, k, k)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    # The graph calls the op (not its implementation's allocations): eager and compiled code
    # enter it by different routes.
    assert explanation.graphs[0].code.count("torch.ops.flashjit.forward.default(") == 2
    out = torch.compile(attention_block, fullgraph=True, backend="aot_eager")(q, k, k)
    out.sum().backward()  # the compiled graph's backward reaches flashjit::backward's fake
    assert out.shape == (B, SK, HQ, 64) and q.grad.shape == q.shape


def test_dynamo_traces_fake_cuda_tensors_into_the_op_without_a_graph_break():
    # Fake tensors on "cuda", as torch.compile traces a GPU model: the dispatcher's CUDA keys
    # (AutogradCUDA, then the fake implementation) run, with no GPU needed.
    with FakeTensorMode():
        q = torch.empty(B, SK, HQ, 64, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        k = torch.empty(B, SK, HKV, 64, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        o = fjt.attention(q, k, k)
        assert o.device.type == "cuda" and o.shape == q.shape and o.requires_grad
    explanation = torch._dynamo.explain(attention_block)(q, k, k)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graphs[0].code.count("torch.ops.flashjit.forward.default(") == 2
