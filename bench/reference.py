"""The correctness checks of the benchmark: an fp32 reference of attention on the upcast
inputs, for a few (batch, head) pairs, computed over query chunks so that even a
16k x 16k score matrix never has to exist at once; and the gradients of plain attention by
torch autograd, for the backward rows and bench/grad_check.py."""
from __future__ import annotations

import math

import torch

# Scores of one chunk: at most this many fp32 elements (256 MiB), whatever the seqlen.
CHUNK_ELEMENTS = 1 << 26


def sampled_heads(batch: int, heads: int) -> list[tuple[int, int]]:
    """First, middle and last (batch, head): catches indexing errors at either end."""
    return sorted({(0, 0), (batch // 2, heads // 2), (batch - 1, heads - 1)})


def reference_head(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                   causal: bool, visible=None) -> tuple[torch.Tensor, torch.Tensor]:
    """O [seqlen_q, dv] and LSE [seqlen_q] in fp32 for one head. q [Sq, dqk], k [Sk, dqk],
    v [Sk, dv] in any float dtype. Causal is bottom-right aligned (DESIGN.md); `visible`, if
    given, maps the query rows start..stop to a bool [stop - start, Sk] mask of the keys they
    may see (a dense form of the benchmark's masks); a row that sees no key gets O = 0 and
    LSE = -inf, as flashjit writes it."""
    q, k, v = q.float(), k.float(), v.float()
    seqlen_q, seqlen_k = q.shape[0], k.shape[0]
    chunk = max(1, CHUNK_ELEMENTS // seqlen_k)
    out = torch.empty(seqlen_q, v.shape[1], dtype=torch.float32, device=q.device)
    lse = torch.empty(seqlen_q, dtype=torch.float32, device=q.device)
    keys = torch.arange(seqlen_k, device=q.device)
    for start in range(0, seqlen_q, chunk):
        stop = min(seqlen_q, start + chunk)
        scores = (q[start:stop] @ k.T) * scale
        if causal:
            rows = torch.arange(start, stop, device=q.device)
            hidden = keys[None, :] > rows[:, None] + (seqlen_k - seqlen_q)
            scores.masked_fill_(hidden, -math.inf)
        if visible is not None:
            scores.masked_fill_(~visible(start, stop), -math.inf)
        row_lse = torch.logsumexp(scores, dim=-1)
        # exp(-inf - 0) = 0 on rows that see nothing, instead of exp(-inf + inf) = nan.
        shift = torch.where(torch.isfinite(row_lse), row_lse, torch.zeros_like(row_lse))
        out[start:stop] = torch.exp(scores - shift[:, None]) @ v
        lse[start:stop] = row_lse
    return out, lse


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Max |a - b| where -inf entries must match exactly (they count as inf otherwise)."""
    a, b = a.float(), b.float()
    both_inf = torch.isneginf(a) & torch.isneginf(b)
    diff = torch.where(both_inf, torch.zeros_like(a), (a - b).abs())
    return float(torch.nan_to_num(diff, nan=math.inf).max())


def check_heads(q, k, v, scale: float, causal: bool, outputs: dict) -> dict:
    """Max abs error of each output against the fp32 reference on the sampled heads.
    q, k, v in torch layout [batch, seqlen, heads, dim]. `outputs` maps a name to
    (o, lse, layout): o [batch, seqlen, heads, dv] for layout "bshd" or [batch, heads,
    seqlen, dv] for "bhsd"; lse [batch, heads, seqlen] or None. Returns
    {name: {"o": err, "lse": err or None}}."""
    errors = {name: {"o": 0.0, "lse": None if lse is None else 0.0}
              for name, (_, lse, _) in outputs.items()}
    heads_per_kv = q.shape[2] // k.shape[2]
    for b, h in sampled_heads(q.shape[0], q.shape[2]):
        hk = h // heads_per_kv
        ref_o, ref_lse = reference_head(q[b, :, h], k[b, :, hk], v[b, :, hk], scale, causal)
        for name, (o, lse, layout) in outputs.items():
            head_o = o[b, :, h] if layout == "bshd" else o[b, h]
            err = errors[name]
            err["o"] = max(err["o"], max_abs_diff(head_o, ref_o))
            if lse is not None:
                err["lse"] = max(err["lse"], max_abs_diff(lse[b, h], ref_lse))
    return errors


def attention_grads(q, k, v, d_o, scale: float, causal: bool, dtype=torch.float32):
    """(dQ, dK, dV) of plain attention (scores, softmax, weighted sum of V) by torch autograd,
    computed in `dtype` on the inputs cast to it. Torch layout [batch, seqlen, heads, dim];
    K/V heads serve heads_q / heads_kv query heads each (GQA), so dK/dV come out summed over
    each group. Causal is bottom-right aligned; every query row must see a key (no causal
    with seqlen_q > seqlen_k), since a row of only -inf scores has no softmax. The whole
    [batch, heads, seqlen_q, seqlen_k] score matrix is held: a 16k x 16k head takes about
    5 GiB in fp32, so give big shapes one head at a time."""
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    group = q.shape[2] // k.shape[2]
    keys, values = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, keys) * scale
    if causal:
        seqlen_q, seqlen_k = q.shape[1], k.shape[1]
        rows = torch.arange(seqlen_q, device=q.device)[:, None]
        hidden = torch.arange(seqlen_k, device=q.device)[None, :] > rows + (seqlen_k - seqlen_q)
        scores = scores.masked_fill(hidden, -math.inf)
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), values)
    return torch.autograd.grad(out, (q, k, v), d_o.to(dtype))


GRAD_NAMES = ("dq", "dk", "dv")


def check_grads_heads(q, k, v, d_o, scale: float, causal: bool, grads: dict) -> dict:
    """Max abs error of each gradient set against the fp32 autograd reference on the sampled
    (batch, head) pairs, one head at a time (heads_q == heads_kv: with GQA a K/V head's
    gradient sums several query heads, so one head alone has no reference). `grads` maps a
    name to (dq, dk, dv) in q's, k's, v's torch layout [batch, seqlen, heads, dim]. Returns
    {name: {"dq", "dk", "dv"}} and, under "reference", each gradient's max |value| (the
    scale the errors are judged by)."""
    if q.shape[2] != k.shape[2]:
        raise ValueError("check_grads_heads compares per head: heads_q must equal heads_kv")
    errors = {name: dict.fromkeys(GRAD_NAMES, 0.0) for name in grads}
    errors["reference"] = dict.fromkeys(GRAD_NAMES, 0.0)
    for b, h in sampled_heads(q.shape[0], q.shape[2]):
        def head(t):
            return t[b:b + 1, :, h:h + 1]

        ref = attention_grads(head(q), head(k), head(v), head(d_o), scale, causal)
        for name, got in grads.items():
            for n, g, r in zip(GRAD_NAMES, got, ref):
                errors[name][n] = max(errors[name][n], max_abs_diff(head(g), r))
        for n, r in zip(GRAD_NAMES, ref):
            errors["reference"][n] = max(errors["reference"][n], float(r.abs().max()))
        del ref
    return errors
