#!/usr/bin/env python3
"""flashjit's backward against torch autograd of plain attention on small shapes (issue 15's
gradient check, run by scripts/gpu_check.sh and first thing by `compare.py --backward`).

Per case: flashjit's forward writes O and LSE, its backward dQ, dK, dV (filled with NaN
before, so an unwritten element fails); the reference is torch autograd of plain attention
in fp32 on the same (upcast) inputs. FlashAttention's acceptance rule for gradients: each
max error <= 2 x the error of the same plain attention computed by PyTorch in the low dtype
+ 2 x the fp32 rounding of the reference. Exit status: 0 every case passed; 1 a case failed
(a mismatch or an error); 77 none failed but flashjit's backward is not served for some
(FLASHJIT_ERROR_USAGE: no kernel path yet); 2 a setup problem; 3 no GPU."""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from shapes import torch_dtype

REPO = Path(__file__).resolve().parent.parent
USAGE_STATUS = 8  # FLASHJIT_ERROR_USAGE: the backward has no kernel path for the case
NOT_SERVED_EXIT = 77


@dataclass(frozen=True)
class GradCase:
    dtype: str
    dqk: int
    dv: int
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    causal: bool

    def label(self) -> str:
        dims = str(self.dqk) if self.dqk == self.dv else f"{self.dqk}/{self.dv}"
        return (f"{self.dtype} d{dims} b{self.batch} h{self.heads_q}/{self.heads_kv} "
                f"s{self.seqlen_q}x{self.seqlen_k} {'causal' if self.causal else 'full'}")

    def spec_yaml(self) -> str:
        return (f"name: grad_check_{self.dtype}_qk{self.dqk}_v{self.dv}"
                f"{'_causal' if self.causal else ''}\nhead_dim_qk: {self.dqk}\n"
                f"head_dim_v: {self.dv}\ndtype: {self.dtype}\n"
                f"causal: {'true' if self.causal else 'false'}\n")


# Small shapes that still reach the corners: several key blocks, ragged ends, sq != sk both
# ways (causal only with sq <= sk, where every query row sees a key), GQA and MQA, qk != v,
# an odd head dim, fp16.
CASES = [
    GradCase("bf16", 64, 64, 2, 4, 4, 128, 128, False),
    GradCase("bf16", 64, 64, 2, 4, 4, 128, 128, True),
    GradCase("bf16", 128, 128, 1, 4, 2, 200, 300, True),
    GradCase("bf16", 192, 128, 1, 2, 2, 97, 97, False),
    GradCase("fp16", 100, 100, 1, 2, 1, 257, 130, False),
    GradCase("bf16", 40, 40, 2, 3, 3, 1, 64, True),
]
# The subset compare.py --backward runs before its rows: one plain, one causal with GQA.
SPOT_CASES = [CASES[0], CASES[2]]


def _grads_of_flashjit(torch, fj, runtime, case: GradCase, q, k, v, d_o, scale: float):
    dt = q.dtype
    stream = torch.cuda.current_stream().cuda_stream
    b, sq, hq = case.batch, case.seqlen_q, case.heads_q
    o = torch.empty(b, sq, hq, case.dv, dtype=dt, device="cuda")
    lse = torch.empty(b, hq, sq, dtype=torch.float32, device="cuda")
    d_q, d_k, d_v = (torch.full_like(t, math.nan) for t in (q, k, v))  # poisoned
    kernel = runtime.kernel(case.spec_yaml())
    try:
        kernel.launcher(q, k, v, o, lse, scale, stream)()
        tensors = (q, k, v, o, lse, d_o, d_q, d_k, d_v)
        size = kernel.backward_workspace_bytes(*tensors, scale)
        workspace = torch.empty(size, dtype=torch.uint8, device="cuda") if size else None
        kernel.backward_launcher(*tensors, scale, stream, workspace)()
        torch.cuda.synchronize()
    finally:
        kernel.close()
    return d_q, d_k, d_v


def check_case(torch, fj, reference, runtime, case: GradCase, seed: int) -> dict:
    """{"label", "status": "pass" | "fail" | "not served" | "error", "message", "grads":
    {name: {"err", "bound", "torch_err"}}}."""
    dt = torch_dtype(torch, case.dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(s, h, d):
        return torch.randn(case.batch, s, h, d, dtype=dt, device="cuda", generator=gen)

    q = randn(case.seqlen_q, case.heads_q, case.dqk)
    k = randn(case.seqlen_k, case.heads_kv, case.dqk)
    v = randn(case.seqlen_k, case.heads_kv, case.dv)
    d_o = randn(case.seqlen_q, case.heads_q, case.dv)
    scale = 1.0 / math.sqrt(case.dqk)
    result = {"label": case.label(), "grads": {}}
    try:
        got = _grads_of_flashjit(torch, fj, runtime, case, q, k, v, d_o, scale)
    except fj.FlashjitError as e:
        result["status"] = "not served" if e.status == USAGE_STATUS else "error"
        result["message"] = str(e)
        return result
    ref = reference.attention_grads(q, k, v, d_o, scale, case.causal, torch.float32)
    low = reference.attention_grads(q, k, v, d_o, scale, case.causal, dt)
    ok = True
    for name, g, r, pt in zip(reference.GRAD_NAMES, got, ref, low):
        rounding = float(((r + 0.3 - 0.3) - r).abs().max())
        torch_err = reference.max_abs_diff(pt, r)
        err = reference.max_abs_diff(g, r)
        bound = 2 * torch_err + 2 * rounding
        result["grads"][name] = {"err": err, "bound": bound, "torch_err": torch_err}
        ok = ok and err <= bound
    result["status"] = "pass" if ok else "fail"
    return result


def describe(result: dict) -> str:
    if result["status"] in ("not served", "error"):
        return f"{result['status'].upper()} {result['label']}: {result['message'].splitlines()[0]}"
    parts = " ".join(f"{n} {g['err']:.2e} (bound {g['bound']:.2e})"
                     for n, g in result["grads"].items())
    return f"{result['status'].upper()} {result['label']}: {parts}"


def run_cases(torch, fj, lib, cases: list[GradCase], log) -> list[dict]:
    """Each case's result, each logged as one line."""
    import reference

    runtime = fj.Runtime(lib)
    try:
        results = []
        for i, case in enumerate(cases):
            results.append(check_case(torch, fj, reference, runtime, case, seed=1000 + i))
            log(describe(results[-1]))
        return results
    finally:
        runtime.close()


def exit_status(results: list[dict]) -> int:
    statuses = {r["status"] for r in results}
    if statuses & {"fail", "error"}:
        return 1
    return NOT_SERVED_EXIT if "not served" in statuses else 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", default=str(REPO / "build" / "capi" / "libflashjit_c.so"),
                   help="path of libflashjit_c.so (default: build/capi/libflashjit_c.so)")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"grad_check.py needs PyTorch: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("grad_check.py needs a CUDA GPU: torch.cuda.is_available() is False",
              file=sys.stderr)
        return 3
    import flashjit_lib as fj

    try:
        lib = fj.Library(args.lib)
    except OSError as e:
        print(f"cannot load the flashjit C library {args.lib}: {e}", file=sys.stderr)
        return 2
    torch.set_float32_matmul_precision("highest")  # the reference is true fp32, not TF32
    results = run_cases(torch, fj, lib, CASES, print)
    status = exit_status(results)
    counts = {s: sum(r["status"] == s for r in results) for s in ("pass", "fail", "error",
                                                                   "not served")}
    print(f"-- grad check: {counts['pass']} of {len(results)} cases passed, {counts['fail']} "
          f"failed, {counts['error']} errors, {counts['not served']} not served "
          f"(exit {status})")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
