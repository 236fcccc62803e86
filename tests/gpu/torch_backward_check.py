#!/usr/bin/env python3
"""flashjit's backward against PyTorch autograd of plain attention (issue 15).

For a few small shapes, random Q, K, V and dO are saved as .npy files, `flashjit run SPEC
--backward --inputs DIR --outputs DIR` writes dQ, dK and dV, and these are compared with
torch.autograd.grad of softmax(scale Q K^T, causal mask) V under FlashAttention's gradient
rule: per tensor, max |G - R| <= 2 max |L - R| + 2 max |R + 0.3 - 0.3 - R|, where R is the
autograd of the fp32 computation on the same (rounded) inputs and L the same computation in
the low dtype. This checks flashjit's gradients against an implementation that is not ours
(the GPU suite checks them against flashjit's own fp64 reference).

    tests/gpu/torch_backward_check.py FLASHJIT_BINARY

Prints one line per case; exits 0 when every case passes, 1 when one fails, 77 without
PyTorch or a CUDA GPU.
"""
import pathlib
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as error:
    print(f"SKIPPED: {error} -- the PyTorch gradient check did not run")
    sys.exit(77)

# (head_dim_qk, head_dim_v, dtype, causal, batch, heads_q, heads_kv, seqlen_q, seqlen_k).
# Causal cases keep seqlen_q <= seqlen_k: a row that sees no key has no softmax in PyTorch.
CASES = [
    (64, 64, "bf16", False, 2, 4, 4, 128, 128),
    (64, 64, "fp16", True, 1, 4, 2, 100, 130),
    (128, 128, "bf16", True, 1, 2, 1, 200, 257),
    (100, 100, "bf16", False, 1, 3, 3, 17, 300),
    (192, 128, "bf16", False, 1, 2, 2, 64, 64),
    (256, 256, "fp16", True, 1, 2, 2, 33, 33),
    (8, 8, "bf16", False, 3, 1, 1, 1, 1000),
]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def attention(q, k, v, causal):
    """Plain attention of [batch, seq, heads, dim] tensors, in their dtype."""
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q * q.shape[-1] ** -0.5, k)
    if causal:
        seqlen_q, seqlen_k = scores.shape[-2:]
        rows = torch.arange(seqlen_q, device=q.device).view(-1, 1)
        cols = torch.arange(seqlen_k, device=q.device).view(1, -1)
        # bottom-right aligned, as flashjit and FlashAttention define causal
        scores = scores.masked_fill(cols > rows + seqlen_k - seqlen_q, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1).to(v.dtype), v)


def gradients(q, k, v, d_o, causal):
    inputs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = attention(*inputs, causal)
    return torch.autograd.grad(out, inputs, d_o)


def check(binary, case, seed, folder):
    dqk, dv, dtype_name, causal, batch, heads_q, heads_kv, seqlen_q, seqlen_k = case
    dtype = DTYPES[dtype_name]
    spec = folder / "spec.yaml"
    spec.write_text(f"name: torch_check\nhead_dim_qk: {dqk}\nhead_dim_v: {dv}\n"
                    f"dtype: {dtype_name}\ncausal: {str(causal).lower()}\nmask: none\n"
                    "arch: auto\ntiles: auto\n")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda").to(dtype)
    q = randn(batch, seqlen_q, heads_q, dqk)
    k = randn(batch, seqlen_k, heads_kv, dqk)
    v = randn(batch, seqlen_k, heads_kv, dv)
    d_o = randn(batch, seqlen_q, heads_q, dv)
    for name, tensor in (("q", q), ("k", k), ("v", v), ("do", d_o)):
        np.save(folder / f"{name}.npy", tensor.float().cpu().numpy())
    run = subprocess.run([binary, "run", str(spec), "--backward", "--inputs", str(folder),
                          "--outputs", str(folder), "--iters", "0"],
                         capture_output=True, text=True)
    what = (f"{dtype_name} {'causal' if causal else 'full'} qk={dqk} v={dv} | b={batch} "
            f"hq={heads_q} hkv={heads_kv} sq={seqlen_q} sk={seqlen_k}")
    if run.returncode not in (0, 1):  # 1: flashjit's own check failed; compare anyway
        print(f"{what} | ERROR: flashjit run exited {run.returncode}: {run.stderr.strip()}")
        return False
    reference = gradients(q.float(), k.float(), v.float(), d_o.float(), causal)
    low = gradients(q, k, v, d_o, causal)
    passed, report = True, []
    for name, want, lowp in zip(("dq", "dk", "dv"), reference, low):
        got = torch.from_numpy(np.load(folder / f"{name}.npy")).cuda()
        error = (got - want).abs().max().item()
        bound = (2 * (lowp.float() - want).abs().max().item()
                 + 2 * (want + 0.3 - 0.3 - want).abs().max().item())
        ok = bool(torch.isfinite(got).all()) and error <= bound
        passed = passed and ok
        report.append(f"{name} {error:.2e}/{bound:.2e}{'' if ok else ' FAIL'}")
    print(f"{what} | {' '.join(report)} | {'ok' if passed else 'FAIL'}")
    return passed


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("SKIPPED: PyTorch sees no CUDA GPU -- the PyTorch gradient check did not run")
        return 77
    passed = 0
    for seed, case in enumerate(CASES):
        with tempfile.TemporaryDirectory() as folder:
            passed += check(sys.argv[1], case, seed, pathlib.Path(folder))
    print(f"-- {passed} of {len(CASES)} cases passed")
    return 0 if passed == len(CASES) else 1


if __name__ == "__main__":
    sys.exit(main())
