"""Where flashjit's backward spends its time: each launch's CUDA time (torch.profiler) for a
few bf16 16k-token shapes, and the whole backward's TFLOP/s (2.5 x the forward's FLOPs).
Run on the GPU machine after the library is built:

    python3 bench/backward_kernels.py --lib build/capi/libflashjit_c.so

bench/NOTES.md entry 21 quotes it."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import flashjit_lib as fj  # noqa: E402
from backward import FlashjitCall  # noqa: E402

SEQLEN = 16384
SHAPES = [(64, 64, 32), (72, 72, 28), (80, 80, 24), (96, 96, 20), (100, 100, 20), (128, 128, 16),
          (136, 136, 15), (176, 176, 11), (192, 192, 10), (128, 256, 11),
          (192, 128, 16), (200, 200, 10), (256, 256, 8), (320, 320, 6), (384, 384, 5),
          (512, 512, 4), (256, 512, 5)]  # dqk, dv, heads


def shapes_of(dims: str) -> list[tuple[int, int, int]]:
    """The shapes --dims names ("192" is 192/192), with SHAPES' head counts, else DESIGN.md's
    2048 / head dim."""
    if not dims:
        return SHAPES
    shapes = []
    for item in dims.split(","):
        qk, _, v = item.strip().partition("/")
        dqk, dv = int(qk), int(v or qk)
        heads = next((h for a, b, h in SHAPES if (a, b) == (dqk, dv)), max(1, 2048 // dqk))
        shapes.append((dqk, dv, heads))
    return shapes


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", default="build/capi/libflashjit_c.so")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--deterministic", action="store_true",
                   help="specs with backward: {deterministic: true} (the ordered dK/dV/dQ kernel "
                        "up to d128 on sm90, the two kernels past it)")
    p.add_argument("--dims", default="",
                   help="comma-separated head dims qk[/v] to run, any (\"192\" is 192/192; "
                        "default: all of SHAPES)")
    p.add_argument("--row-pad", type=int, default=0, metavar="N",
                   help="Q, K, V and dO as views into rows padded to a multiple of N elements "
                        "(64: 128-byte aligned bf16 rows), the same values: how the rows' "
                        "alignment moves the kernels (bench/NOTES.md entry 42)")
    args = p.parse_args()
    shapes = shapes_of(args.dims)
    runtime = fj.Runtime(fj.Library(args.lib))
    # Every shape's kernel stays loaded until the end: closed per shape, a later shape's launch
    # was once named after an unloaded kernel in the profiler (most likely a function handle
    # handed out again; bench/NOTES.md entry 45).
    kernels = []
    for dqk, dv, heads in shapes:
        det = "true" if args.deterministic else "false"
        kernel = runtime.kernel(f"name: split_{dqk}_{dv}\nhead_dim_qk: {dqk}\nhead_dim_v: {dv}\n"
                                f"dtype: bf16\ncausal: {'true' if args.causal else 'false'}\n"
                                f"backward: {{deterministic: {det}}}\n")
        kernels.append(kernel)
        def rows(dim):
            width = -(-dim // args.row_pad) * args.row_pad if args.row_pad else dim
            return torch.randn(1, SEQLEN, heads, width, dtype=torch.bfloat16,
                               device="cuda")[..., :dim]
        q, k = rows(dqk), rows(dqk)
        v, d_o = rows(dv), rows(dv)
        call = FlashjitCall(torch, kernel, q, k, v, d_o, 1 / math.sqrt(dqk))
        call.forward()
        backward = call.backward()
        backward()  # the first call may compile
        torch.cuda.synchronize()
        runs = 5
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(runs):
                backward()
            torch.cuda.synchronize()
        pairs = SEQLEN * SEQLEN / (2 if args.causal else 1)
        flops = 2.5 * 2 * pairs * heads * (dqk + dv)
        total = 0.0
        for event in prof.key_averages():
            if event.device_type != torch.autograd.DeviceType.CUDA or not event.count:
                continue
            ms = event.device_time_total / runs / 1e3
            total += ms
            print(f"d{dqk}/{dv}: {event.key[:72]:72s} {ms:8.3f} ms")
        print(f"d{dqk}/{dv}: backward {total:.3f} ms, {flops / total / 1e9:.0f} TFLOP/s")
    for kernel in kernels:
        kernel.close()
    runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
