"""flashjit.torch without a GPU: the ops' schemas and fake implementations (run on
meta tensors, as torch.compile's tracing runs them), their autograd wiring, what the SDPA
entry point refuses, and when attention() calls the ops' implementations itself rather than
through the dispatcher. Skipped, with the reason, where torch is not installed."""
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


# attention()'s two routes, on CPU tensors passed off as CUDA ones: Tensor.is_cuda reads
# is_cpu, the ops get CPU kernels (the CUDA implementations, counted), and the kernels launch
# nothing. `routes` counts the direct calls of the implementations and those the dispatcher
# makes.
class _StubCore:
    def forward_exchange(self, q, k, v, o, lse, *options):
        o.fill_(1.0)
        if lse is not None:  # attention() without a gradient or return_lse asks for none
            lse.fill_(2.0)
        return True


class _StubKernel:
    _core = _StubCore()

    def backward(self, q, k, v, o, lse, d_o, *, d_q, d_k, d_v, **options):
        return d_q.fill_(3.0), d_k.fill_(4.0), d_v.fill_(5.0)


@pytest.fixture
def routes(monkeypatch):
    counts = {"direct forward": 0, "op forward": 0, "direct backward": 0, "op backward": 0}

    def counted(name, impl):
        def call(*args):
            counts[name] += 1
            return impl(*args)
        return call

    monkeypatch.setattr(torch.Tensor, "is_cuda", torch._C.TensorBase.is_cpu)
    monkeypatch.setattr(fjt, "_kernel", lambda spec: _StubKernel())
    # The dispatcher holds the implementations registered at import: the module's names
    # are what attention() calls directly.
    lib = torch.library.Library("flashjit", "IMPL")
    lib.impl("forward", counted("op forward", fjt._forward_cuda), "CPU")
    lib.impl("backward", counted("op backward", fjt._backward_cuda), "CPU")
    monkeypatch.setattr(fjt, "_forward_cuda", counted("direct forward", fjt._forward_cuda))
    monkeypatch.setattr(fjt, "_forward_o_only", counted("direct forward", fjt._forward_o_only))
    monkeypatch.setattr(fjt, "_backward_cuda", counted("direct backward", fjt._backward_cuda))
    yield counts
    lib._destroy()


def cpu(*shape, grad=False):
    return torch.randn(shape, dtype=torch.bfloat16).requires_grad_(grad)


def qkv(grad=False):
    return cpu(B, SQ, HQ, 64, grad=grad), cpu(B, SK, HKV, 64, grad=grad), cpu(B, SK, HKV, 64, grad=grad)


def test_eager_attention_calls_the_implementations_directly(routes):
    q, k, v = qkv()
    o = fjt.attention(q, k, v, causal=True)
    assert routes == {"direct forward": 1, "op forward": 0, "direct backward": 0, "op backward": 0}
    assert o.shape == (B, SQ, HQ, 64) and not o.requires_grad and bool((o == 1).all())
    fjt.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                     enable_gqa=True)
    assert routes["direct forward"] == 2 and routes["op forward"] == 0


def test_eager_gradient_calls_the_implementations_directly(routes):
    q, k, v = qkv(grad=True)
    o, lse = fjt.attention(q, k, v, return_lse=True)
    assert o.requires_grad and not lse.requires_grad
    o.sum().backward()
    assert routes == {"direct forward": 1, "op forward": 0, "direct backward": 1, "op backward": 0}
    assert [float(t.grad[0, 0, 0, 0]) for t in (q, k, v)] == [3.0, 4.0, 5.0]


def test_both_routes_give_the_same_tensors_and_graph(routes):
    q, k, v = qkv(grad=True)
    spec = fjt.spec_text(q.dtype, 64, 64, causal=True)
    direct = fjt.attention(q, k, v, causal=True, return_lse=True)
    op = torch.ops.flashjit.forward(q, k, v, spec, 0.0, None, None, None, None, 0, 0)
    assert routes["direct forward"] == 1 and routes["op forward"] == 1
    for a, b in zip(direct, op):
        assert (a.shape, a.stride(), a.dtype, a.requires_grad) == (b.shape, b.stride(), b.dtype, b.requires_grad)
        assert torch.equal(a, b)
    assert type(direct[0].grad_fn) is type(op[0].grad_fn)
    with torch.no_grad():
        assert not fjt.attention(q, k, v).requires_grad


def test_below_autograd_neither_route_records_a_gradient(routes):
    # As the dispatcher skips the Autograd implementation where a context excludes its keys.
    q, k, v = qkv(grad=True)
    with torch._C._AutoDispatchBelowAutograd():
        assert not fjt.attention(q, k, v).requires_grad
    assert routes["direct forward"] == 1


class _Recorder(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


class _FunctionRecorder(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", [_Recorder, _FunctionRecorder])
def test_a_mode_sees_the_op(routes, mode):
    q, k, v = qkv(grad=True)
    with mode() as recorder:
        o = fjt.attention(q, k, v)
    assert torch.ops.flashjit.forward.default in recorder.ops
    assert routes["direct forward"] == 0 and routes["op forward"] == 1
    o.sum().backward()  # no mode: the backward's route is its own
    assert routes["direct backward"] == 1 and routes["op backward"] == 0


def test_a_backward_under_a_dispatch_mode_takes_the_op(routes):
    # (A TorchFunctionMode sees Tensor.backward and runs it with the mode off, as it runs
    # every function it is handed.)
    q, k, v = qkv(grad=True)
    o = fjt.attention(q, k, v)
    with _Recorder() as recorder:
        o.sum().backward()
    assert torch.ops.flashjit.backward.default in recorder.ops
    assert routes["direct forward"] == 1 and routes["direct backward"] == 0
    assert routes["op backward"] == 1


def test_a_device_context_is_a_function_mode_and_gets_the_op(routes):
    with torch.device("cpu"):
        fjt.attention(*qkv())
    assert routes["direct forward"] == 0 and routes["op forward"] == 1


def test_fake_tensors_get_the_op(routes):
    with FakeTensorMode():
        o = fjt.attention(*qkv(grad=True))
        o.sum().backward()
    assert routes == {"direct forward": 0, "op forward": 0, "direct backward": 0, "op backward": 0}


def test_vmap_gets_the_op(routes):
    q, k, v = qkv()
    out = torch.vmap(lambda x: fjt.attention(x, k, v), in_dims=2, out_dims=2)(q.unsqueeze(2))
    assert out.shape == (B, SQ, 1, HQ, 64)
    assert routes["direct forward"] == 0 and routes["op forward"] > 0


def test_the_profiler_records_the_op(routes):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fjt.attention(*qkv())
    assert routes["direct forward"] == 0 and routes["op forward"] == 1
    assert "flashjit::forward" in {event.key for event in prof.key_averages()}


def test_jit_trace_records_the_op(routes):
    traced = torch.jit.trace(lambda q, k, v: fjt.attention(q, k, v), qkv(), check_trace=False)
    assert "flashjit::forward" in str(traced.graph)
    assert routes["direct forward"] == 0


class _Subclass(torch.Tensor):
    pass


def test_a_tensor_subclass_gets_the_op(routes):
    # Whose __torch_function__ (torch.Tensor's here) hands back its own type.
    q, k, v = qkv()
    o = fjt.attention(q.as_subclass(_Subclass), k, v)
    assert type(o) is _Subclass
    assert routes["direct forward"] == 0 and routes["op forward"] == 1


def test_a_negative_view_gets_the_op_which_resolves_it(routes):
    q, k, v = qkv()
    fjt.attention(torch._neg_view(q), k, v)
    assert routes["direct forward"] == 0 and routes["op forward"] == 1


def test_torch_compile_gets_the_op(routes):
    q, k, v = cpu(B, SK, HQ, 64, grad=True), cpu(B, SK, HKV, 64, grad=True), cpu(B, SK, HKV, 64, grad=True)
    explanation = torch._dynamo.explain(attention_block)(q, k, v)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graphs[0].code.count("torch.ops.flashjit.forward.default(") == 2
    routes.update(dict.fromkeys(routes, 0))  # explain ran the graph too
    out = torch.compile(attention_block, fullgraph=True, backend="aot_eager")(q, k, v)
    out.sum().backward()
    assert routes["direct forward"] == 0 and routes["op forward"] == 2
    assert routes["direct backward"] == 0 and routes["op backward"] == 2


def test_a_second_derivative_takes_the_op_and_is_refused(routes):
    q, k, v = qkv(grad=True)
    (d_q,) = torch.autograd.grad(fjt.attention(q, k, v).sum(), q, create_graph=True)
    assert routes["direct forward"] == 1 and routes["op backward"] == 1
    with pytest.raises(NotImplementedError, match="no double backward"):
        d_q.sum().backward()


@pytest.mark.parametrize("op", ["flashjit::forward", "flashjit::backward"])
def test_autocast_falls_through_the_ops(op):
    # Why attention() goes direct under autocast: the dispatcher's Autocast keys fall through
    # ops with no autocast kernel, so the op would get the tensors unchanged as well.
    for key in ("AutocastCUDA", "AutocastCPU"):
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(op, key), key


def test_autocast_leaves_both_routes_the_tensors_dtype(routes):
    q, k, v = qkv()
    spec = fjt.spec_text(q.dtype, 64, 64)
    with torch.autocast("cpu", dtype=torch.float16):
        o = fjt.attention(q, k, v)
        o_op, _ = torch.ops.flashjit.forward(q, k, v, spec, 0.0, None, None, None, None, 0, 0)
    assert o.dtype == o_op.dtype == torch.bfloat16
    assert routes["direct forward"] == 1 and routes["op forward"] == 1
