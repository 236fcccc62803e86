"""Times flashjit's forward over several explicit tile configurations on the benchmark's
shapes, to choose the built-in heuristic (and, later, to check the autotuner against).
Prints one line per (shape, tiles): milliseconds, TFLOP/s, registers, spills.

  python3 bench/tile_sweep.py --lib build/capi/libflashjit_c.so --dims 64,128 \
      --seqlens 4096 --tiles 128x64x8x2,128x64x4x2
"""
from __future__ import annotations

import argparse
import sys

import torch

import flashjit_lib
import shapes as grid_lib
import timing


def parse_tiles(text: str) -> list[tuple[int, int, int, int]]:
    return [tuple(int(x) for x in item.split("x")) for item in text.split(",") if item]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default="build/capi/libflashjit_c.so")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqlens", default="4096")
    ap.add_argument("--causal", default="false,true")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--tiles", required=True, help="BMxBNxWARPSxSTAGES,...")
    args = ap.parse_args(argv)

    lib = flashjit_lib.Library(args.lib)
    runtime = flashjit_lib.Runtime(lib)
    torch_dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    for dqk, dv in grid_lib.parse_dims(args.dims):
        for seqlen in grid_lib.parse_ints(args.seqlens):
            for causal in [c.strip() == "true" for c in args.causal.split(",")]:
                shape = grid_lib.Shape(args.dtype, dqk, dv, seqlen, causal)
                b, h = shape.batch, shape.heads
                q = torch.randn(b, seqlen, h, dqk, device="cuda", dtype=torch_dtype)
                k = torch.randn(b, seqlen, h, dqk, device="cuda", dtype=torch_dtype)
                v = torch.randn(b, seqlen, h, dv, device="cuda", dtype=torch_dtype)
                o = torch.empty(b, seqlen, h, dv, device="cuda", dtype=torch_dtype)
                lse = torch.empty(b, h, seqlen, device="cuda", dtype=torch.float32)
                flops = grid_lib.forward_flops(shape)
                for bm, bn, w, s in parse_tiles(args.tiles):
                    yaml = (f"head_dim_qk: {dqk}\nhead_dim_v: {dv}\ndtype: {args.dtype}\n"
                            f"causal: {'true' if causal else 'false'}\n"
                            f"tiles: {{block_m: {bm}, block_n: {bn}, warps: {w}, stages: {s}}}\n")
                    label = f"{shape.label()} m{bm}n{bn}w{w}s{s}"
                    try:
                        kernel = runtime.kernel(yaml)
                        launch = kernel.launcher(q, k, v, o, lse, dqk ** -0.5,
                                                 torch.cuda.current_stream().cuda_stream)
                        launch()
                        torch.cuda.synchronize()
                        ms = timing.median_ms(launch)
                        rep = kernel.reports()["reports"][0]
                        print(f"{label:60s} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s "
                              f"regs {rep.get('registers')} spill {rep.get('spill_store_bytes')}",
                              flush=True)
                    except Exception as e:  # a config that cannot run is a line, not a stop
                        print(f"{label:60s} failed: {str(e).splitlines()[0][:120]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
