"""The fp64 reference of attention on the GPU (torch float64 math) and FlashAttention's
acceptance rule (hopper/test_flash_attn.py; verify/backward_run.h states it for the C++
tests): a result G passes against the fp64 reference R when

    max |G - R| <= 2 max |L - R| + 2 max |fl32(fl32(R) + 0.3) - 0.3 - fl32(R)|

where L is the same computation done in the inputs' low dtype the way PyTorch does it (scores
and P rounded to the dtype): twice the error of an ordinary low-precision implementation, plus
twice the rounding an fp32 value of R's size carries."""
import torch


def visible(seqlen_q, seqlen_k, causal, window, device):
    """[seqlen_q, seqlen_k] bool: query i sees key j (bottom-right aligned, DESIGN.md)."""
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    diagonal = i + seqlen_k - seqlen_q
    seen = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if causal:
        seen &= j <= diagonal
    if window is not None:
        seen &= (j >= diagonal - window[0]) & (j <= diagonal + window[1])
    return seen


def attention(q, k, v, causal=False, window=None, scale=None, dtype=torch.float64, seen=None):
    """(o, lse) of q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] computed in `dtype` (float64: the
    reference; the inputs' dtype: PyTorch's low-precision attention, softmax in fp32 as
    FlashAttention's attention_ref does). `seen`: a [Sq, Sk] bool mask applied on top (a block
    layout's). Differentiable. Rows that see no key give o = 0 and lse = -inf."""
    group = q.shape[2] // k.shape[2]
    q, k, v = (t.to(dtype) for t in (q, k, v))
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    mask = visible(q.shape[1], k.shape[1], causal, window, q.device)
    seen = mask if seen is None else mask & seen
    scores = scores.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(scores.float() if dtype != torch.float64 else scores, dim=-1)
    p = torch.softmax(scores.float() if dtype != torch.float64 else scores, dim=-1)
    p = p.masked_fill(~seen.any(dim=-1)[:, None], 0.0).to(dtype)
    return torch.einsum("bhqk,bkhd->bqhd", p, v), lse


def bound(reference, lowp):
    """FlashAttention's bound on max |G - R| (the module docstring)."""
    r32 = reference.float()
    rounding = ((r32 + 0.3) - 0.3 - r32).abs().max().item()
    return 2 * (lowp.double() - reference).abs().max().item() + 2 * rounding


def assert_close(name, got, reference, lowp):
    error = (got.double() - reference).abs().max().item()
    allowed = bound(reference, lowp)
    assert error <= allowed, f"{name}: max error {error:.3g} over FlashAttention's bound {allowed:.3g}"
