"""Where a launch's time goes, for flashjit and FlexAttention on the mask benchmark's shapes:
do_bench (L2 flushed between runs, what compare.py reports), back-to-back launches, the
kernel's own time from torch.profiler, and the host time of one call. Also sweeps the sm90
tiles of the masked kernels. Run on the GPU machine after scripts/setup.sh:

    python3 bench/time_split.py --lib build/capi/libflashjit_c.so

Prints one line per (kernel, shape); bench/NOTES.md entry 8 quotes it."""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import flashjit_lib as fj  # noqa: E402
import masks  # noqa: E402
import shapes as grid_lib  # noqa: E402

SEQLEN = 16384


def back_to_back_ms(fn, n: int = 30) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def host_us(fn, n: int = 50) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    elapsed = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return elapsed


def kernel_ms(fn, prefix: str, n: int = 10) -> float:
    """Mean device time of the kernels whose name starts with `prefix`."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    times = [e.device_time for e in prof.events()
             if e.device_type.name == "CUDA" and e.name.startswith(prefix)]
    return sum(times) / len(times) / 1000.0 if times else math.nan


def report(tag: str, fn, prefix: str) -> None:
    print(f"{tag:46s} do_bench {do_bench(fn, warmup=25, rep=100, return_mode='median'):.3f}  "
          f"back-to-back {back_to_back_ms(fn):.3f}  kernel {kernel_ms(fn, prefix):.3f} ms  "
          f"host {host_us(fn):.1f} us", flush=True)


def run(runtime, flex, d: int, kind: str, density: float = 0.0, tiles=None) -> None:
    """kind: dense, causal, window or sparse; tiles: (block_n, stages) of the sm90 kernel."""
    shape = grid_lib.MaskShape(d, kind if kind in ("window", "sparse") else "window", density)
    heads = 2048 // d
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(1, SEQLEN, heads, d, dtype=torch.bfloat16, device="cuda",
                           generator=gen) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(1, heads, SEQLEN, dtype=torch.float32, device="cuda")
    counts = indices = None
    if kind == "sparse":
        _, counts, indices = masks._random_layout(torch, heads, SEQLEN // grid_lib.MASK_BLOCK,
                                                  density, gen)
    if kind == "dense":
        yaml = shape.dense_spec_yaml()
    elif kind == "causal":
        yaml = f"name: causal_d{d}\nhead_dim: {d}\ndtype: bf16\ncausal: true\n"
    else:
        yaml = shape.spec_yaml()
    if tiles:
        yaml += f"tiles: {{block_m: 128, block_n: {tiles[0]}, warps: 12, stages: {tiles[1]}}}\n"
    kernel = runtime.kernel(yaml)
    try:
        launch = kernel.launcher(q, k, v, o, lse, 1 / math.sqrt(d),
                                 torch.cuda.current_stream().cuda_stream,
                                 layout=(counts, indices) if kind == "sparse" else None)
        launch()
        t = kernel.reports()["reports"][-1]["tiles"]
        tag = f"d{d} {kind} {density:g} n{t['block_n']}s{t['stages']}"
        report("flashjit " + tag, launch, "fa_fwd")
    finally:
        kernel.close()
    if flex is not None and kind in ("window", "sparse") and not tiles:
        block_mask = masks._flex_block_mask(torch, shape, counts, indices)
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        report("flex     " + tag,
               lambda: flex(qt, kt, vt, block_mask=block_mask, scale=1 / math.sqrt(d)), "triton")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", default=str(Path(__file__).resolve().parent.parent / "build" /
                                             "capi" / "libflashjit_c.so"),
                        help="path of libflashjit_c.so")
    lib = fj.Library(parser.parse_args().lib)
    runtime = fj.Runtime(lib)
    flex, note = masks.flex_available(torch)
    if note:
        print(f"FlexAttention: {note}")
    try:
        for d in (128, 64):
            for kind, density in (("dense", 0.0), ("causal", 0.0), ("window", 0.0),
                                  ("sparse", 0.1), ("sparse", 0.5)):
                run(runtime, flex, d, kind, density)
        for tiles in ((64, 2), (64, 3), (64, 4), (96, 3), (112, 3), (128, 2)):
            run(runtime, None, 128, "window", tiles=tiles)
        for tiles in ((64, 3), (64, 4), (128, 2)):
            run(runtime, None, 128, "sparse", 0.1, tiles=tiles)
    finally:
        runtime.close()


if __name__ == "__main__":
    main()
