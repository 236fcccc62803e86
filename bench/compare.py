#!/usr/bin/env python3
"""flashjit side by side with PyTorch's scaled_dot_product_attention backends (cuDNN,
FlashAttention-2 "flash", memory-efficient, and PyTorch's default choice) on the grid of
issue 3, in one run on one GPU: per shape the time and TFLOP/s of each, flashjit's ratios,
flashjit's max error against an fp32 reference computed in the same run, and flashjit's
compile times (cold NVRTC, warm disk cache). Writes bench/results/<date>-<gpu>-<commit>.md
and .json, and latest.md / latest.json. --masks, --backward and --decode run the mask
benchmark (masks.py), the backward rows (backward.py) and the decode rows (decode.py)
instead. See bench/README.md.

Needs torch, triton (optional: timing falls back to CUDA events), the standard library and
libflashjit_c.so; nothing else is installable on the GPU machine."""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import shapes as grid_lib

REPO = Path(__file__).resolve().parent.parent

# Sanity flags on the error columns (the tests in tests/gpu are the correctness authority):
# flashjit's max |O - reference| may be a few times PyTorch's own (a different order of
# bf16/fp16 roundings), never much more; LSE is fp32 throughout.
O_ERROR_FACTOR = 4.0
O_ERROR_FLOOR = {"bf16": 4e-3, "fp16": 1e-3}
LSE_TOLERANCE = 1e-3
# The first call of each kernel runs on these small inputs (with the benchmark's heads and
# head dims, hence the same alignment variant) so compile time stays out of every timing.
COMPILE_SEQLEN = 128


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", default=str(REPO / "build" / "capi" / "libflashjit_c.so"),
                   help="path of libflashjit_c.so (default: build/capi/libflashjit_c.so)")
    p.add_argument("--out", default=str(REPO / "bench" / "results"),
                   help="folder for the .md/.json results (default: bench/results)")
    p.add_argument("--commit", default="unknown", help="git commit of the flashjit tree")
    p.add_argument("--quick", action="store_true",
                   help="seqlen 4096 and head dims 64, 100, 128, 192/128 only: a fast check")
    p.add_argument("--dims", type=grid_lib.parse_dims, default=None,
                   help="head dims, e.g. 64,128,192/128 (qk/v); fp16 runs those of 64,128")
    p.add_argument("--seqlens", type=grid_lib.parse_ints, default=None,
                   help="e.g. 1024,4096,16384")
    p.add_argument("--dtypes", default="bf16,fp16", help="bf16,fp16 or one of them")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 4,
                   help="threads compiling flashjit kernels in parallel")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--masks", action="store_true",
                   help="run the mask benchmark (issue 6: sliding window and block-sparse "
                        "against FlexAttention, bench/masks.py) instead of the grid; --dims "
                        "picks its head dims (default 64,128)")
    p.add_argument("--backward", action="store_true",
                   help="run the backward rows (issue 15, bench/backward.py) instead of the "
                        "grid: bf16, 16k tokens and the 23,400-token series, flashjit's "
                        "default and deterministic backwards beside SDPA's cuDNN, FA2 and "
                        "efficient backwards; --dims, --seqlens and --quick replace its head "
                        "dims and seqlen (and drop the long series)")
    p.add_argument("--no-deterministic", action="store_true",
                   help="with --backward: leave out the kernels whose spec asks for "
                        "backward: {deterministic: true} (their columns and issue 15's "
                        "deterministic target), for quick runs")
    p.add_argument("--decode", action="store_true",
                   help="run the decode rows (issue 16, bench/decode.py) instead: new query "
                        "rows against long dense and paged KV caches beside SDPA's backends, "
                        "ms and K/V TB/s; --quick: ANCHORS.md's decode rows only; the first "
                        "of --dtypes")
    p.add_argument("--list", action="store_true",
                   help="print the shapes the run would measure (FLOPs, targets) and exit: "
                        "needs no GPU, torch or library")
    args = p.parse_args(argv)
    if sum((args.masks, args.backward, args.decode)) > 1:
        p.error("--masks, --backward and --decode are separate runs: pick one")
    if args.no_deterministic and not args.backward:
        p.error("--no-deterministic goes with --backward")
    args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in args.dtypes:
        if d not in ("bf16", "fp16"):
            p.error(f"--dtypes: {d!r} is not bf16 or fp16")
    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- flashjit compile phase

def _small_inputs(torch, key: grid_lib.KernelKey, heads: int) -> dict:
    dt = grid_lib.torch_dtype(torch, key.dtype)
    s = COMPILE_SEQLEN

    def make(d):
        return torch.randn(1, s, heads, d, dtype=dt, device="cuda")

    return {"q": make(key.dqk), "k": make(key.dqk), "v": make(key.dv), "o": make(key.dv),
            "lse": torch.empty(1, heads, s, dtype=torch.float32, device="cuda")}


def _first_call(runtime, key, inputs, stream) -> tuple:
    """(kernel, wall ms of its first forward, which compiles or loads it)."""
    kernel = runtime.kernel(key.spec_yaml())
    try:
        launch = kernel.launcher(inputs["q"], inputs["k"], inputs["v"], inputs["o"],
                                 inputs["lse"], 0.0, stream)
        start = time.perf_counter()
        launch()
        return kernel, (time.perf_counter() - start) * 1e3
    except BaseException:
        kernel.close()
        raise


def compile_phase(torch, fj, lib, heads_of: dict, workers: int) -> tuple[dict, dict]:
    """Cold: a fresh FLASHJIT_CACHE_DIR, every kernel's first call in a thread pool (ctypes
    releases the GIL, NVRTC runs in parallel). Warm: a new Runtime on that cache, each first
    call again, one at a time (disk load, no NVRTC). Returns ({key: warm kernel},
    {key: compile info}); the warm kernels are the ones benchmarked."""
    cache_dir = tempfile.mkdtemp(prefix="flashjit-bench-cache-")
    os.environ["FLASHJIT_CACHE_DIR"] = cache_dir  # read when a Runtime is created
    os.environ.pop("FLASHJIT_DISABLE_CACHE", None)  # the warm load needs the disk cache
    stream = torch.cuda.current_stream().cuda_stream
    inputs = {key: _small_inputs(torch, key, heads) for key, heads in heads_of.items()}
    info = {key: {} for key in heads_of}
    kernels = {}
    try:
        cold = fj.Runtime(lib)

        def cold_call(key):
            try:
                kernel, ms = _first_call(cold, key, inputs[key], stream)
                reports = kernel.reports()["reports"]
                kernel.close()
                return key, {"cold_ms": ms, "reports": reports,
                             "nvrtc_ms": sum(r["compile_ms"] for r in reports)}
            except fj.FlashjitError as e:
                return key, {"error": str(e)}

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for done, (key, result) in enumerate(pool.map(cold_call, list(heads_of)), 1):
                info[key].update(result)
                status = (f"{result['cold_ms']:.0f} ms" if "cold_ms" in result
                          else result["error"].splitlines()[0])
                log(f"[compile {done}/{len(heads_of)}] {key.name}: {status}")
        torch.cuda.synchronize()
        cold.close()
        log(f"[compile] {len(heads_of)} kernels cold in {time.perf_counter() - start:.1f} s "
            f"with {workers} threads")

        warm = fj.Runtime(lib)
        for key in heads_of:
            if "error" in info[key]:
                continue
            try:
                kernel, ms = _first_call(warm, key, inputs[key], stream)
                info[key]["warm_ms"] = ms
                info[key]["warm_cache_hit"] = all(r["cache_hit"]
                                                  for r in kernel.reports()["reports"])
                kernels[key] = kernel
            except fj.FlashjitError as e:
                info[key]["error"] = f"warm load: {e}"
        torch.cuda.synchronize()
        warm.close()  # kernels outlive their runtime
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return kernels, info


# ---------------------------------------------------------------- one shape

def _sdpa_backends(torch):
    from torch.nn.attention import SDPBackend
    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "auto": None}


def _time_sdpa(torch, timing, backend, q, k, v, causal: bool, scale: float, flops: int):
    """({"ms", "tflops"} | {"refused": reason} | {"oom": True, ...}, output or None).
    `backend` None is PyTorch's own choice (no context manager)."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    def fn():
        return sdpa(q, k, v, is_causal=causal, scale=scale)

    context = contextlib.nullcontext() if backend is None else sdpa_kernel([backend])
    try:
        with context, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = fn()
            torch.cuda.synchronize()
            ms = timing.median_ms(fn)
        return {"ms": ms, "tflops": flops / ms / 1e9}, out
    except torch.cuda.OutOfMemoryError as e:
        torch.cuda.empty_cache()
        return {"oom": True, "error": str(e).splitlines()[0]}, None
    except RuntimeError as e:
        # A backend that cannot serve the shape raises "No available kernel" after warning
        # why ("... not used because:", then one warning per reason): keep the warnings.
        reasons = list(dict.fromkeys(str(w.message).strip() for w in caught))
        reason = " ".join(reasons) or str(e).splitlines()[0]
        return {"refused": " ".join(reason.split())[:300]}, None


def new_row(shape: grid_lib.Shape) -> dict:
    return {"label": shape.label(), "dtype": shape.dtype, "dqk": shape.dqk, "dv": shape.dv,
            "seqlen": shape.seqlen, "causal": shape.causal, "batch": shape.batch,
            "heads": shape.heads, "flops": grid_lib.forward_flops(shape), "flashjit": {},
            "torch": {}}


def run_shape(torch, timing, reference, fj, shape: grid_lib.Shape, kernel, seed: int) -> dict:
    row = new_row(shape)
    flops = row["flops"]
    dt = grid_lib.torch_dtype(torch, shape.dtype)
    b, s, h = shape.batch, shape.seqlen, shape.heads
    scale = 1.0 / math.sqrt(shape.dqk)
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(d):
        return torch.randn(b, s, h, d, dtype=dt, device="cuda", generator=gen)

    q, k, v = randn(shape.dqk), randn(shape.dqk), randn(shape.dv)
    outputs = {}  # for the error check: name -> (o, lse, layout)

    if kernel is not None:
        o = torch.full((b, s, h, shape.dv), float("nan"), dtype=dt, device="cuda")  # poisoned
        lse = torch.full((b, h, s), float("nan"), dtype=torch.float32, device="cuda")
        try:
            launch = kernel.launcher(q, k, v, o, lse, scale,
                                     torch.cuda.current_stream().cuda_stream)
            launch()
            torch.cuda.synchronize()
            outputs["flashjit"] = (o, lse, "bshd")
            ms = timing.median_ms(launch)
            row["flashjit"] = {"ms": ms, "tflops": flops / ms / 1e9}
            row["flashjit"]["variants"] = len(kernel.reports()["reports"])
        except fj.FlashjitError as e:
            row["flashjit"] = {"error": str(e)}

    # SDPA takes [batch, heads, seqlen, dim]: transposed views of the same tensors. The
    # grid's seqlen_q == seqlen_k, where is_causal (top-left) equals bottom-right causal.
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    for name, backend in _sdpa_backends(torch).items():
        entry, out = _time_sdpa(torch, timing, backend, qt, kt, vt, shape.causal, scale, flops)
        row["torch"][name] = entry
        if name == "auto" and out is not None:
            outputs["torch"] = (out, None, "bhsd")

    if outputs:
        errors = reference.check_heads(q, k, v, scale, shape.causal, outputs)
        if "flashjit" in errors:
            row["flashjit"]["err_o"] = errors["flashjit"]["o"]
            row["flashjit"]["err_lse"] = errors["flashjit"]["lse"]
        if "torch" in errors:
            row["torch_err_o"] = errors["torch"]["o"]
    return row


def failed_row(shape: grid_lib.Shape, error: Exception) -> dict:
    row = new_row(shape)
    row["flashjit"]["error"] = f"shape aborted: {type(error).__name__}: {str(error).splitlines()[0]}"
    return row


def summarize(row: dict, shape: grid_lib.Shape) -> None:
    """Adds the ratios, the issue-3 target verdict and the error sanity flag to `row`."""
    fj = row["flashjit"].get("tflops")
    timed = {n: e["tflops"] for n, e in row["torch"].items() if "tflops" in e}
    best = max(timed.values(), default=None)
    row["best_torch"] = max(timed, key=timed.get) if timed else None
    row["ratio_best"] = fj / best if fj and best else None
    row["ratio_fa2"] = fj / timed["flash"] if fj and "flash" in timed else None
    target = grid_lib.target_for(shape)
    if target is not None:
        ratio = row["ratio_fa2"] if target.baseline == "flash" else row["ratio_best"]
        if target.baseline == "flash" and "flash" not in timed:
            ratio = row["ratio_best"]  # FA2 refused the shape: judge against the best
        row["target"] = {"describe": target.describe(), "ratio": ratio,
                         "met": ratio is not None and ratio >= target.factor}
    err_o, err_lse = row["flashjit"].get("err_o"), row["flashjit"].get("err_lse")
    if err_o is not None:
        bound = max(O_ERROR_FACTOR * (row.get("torch_err_o") or 0.0), O_ERROR_FLOOR[shape.dtype])
        row["check_ok"] = err_o <= bound and (err_lse is None or err_lse <= LSE_TOLERANCE)


def progress(i: int, n: int, row: dict, elapsed: float) -> str:
    fj = row["flashjit"]
    if "tflops" in fj:
        ratio = f" ({row['ratio_best']:.2f}x best)" if row.get("ratio_best") else ""
        head = f"flashjit {fj['ms']:.3f} ms {fj['tflops']:.0f} TF/s{ratio} err {fj.get('err_o', 0):.1e}"
    else:
        head = f"flashjit {fj.get('error', 'not run').splitlines()[0][:80]}"
    torch_part = " ".join(
        f"{n} {e['tflops']:.0f}" if "tflops" in e else f"{n} {'OOM' if e.get('oom') else '-'}"
        for n, e in row["torch"].items())
    return f"[{i}/{n}] {row['label']}: {head} | {torch_part} | {elapsed:.0f} s"


# ---------------------------------------------------------------- main

def selected_shapes(args: argparse.Namespace) -> list:
    if args.masks:
        return grid_lib.mask_grid([d for d, _ in args.dims] if args.dims else None)
    if args.backward:
        return grid_lib.backward_grid(args.dims, args.seqlens, args.quick)
    return grid_lib.grid(args.dims, args.seqlens, args.dtypes, args.quick)


def list_shapes(args: argparse.Namespace) -> int:
    """--list: one line per shape, with the FLOPs its TFLOP/s are counted from."""
    shapes = selected_shapes(args)
    for shape in shapes:
        if args.masks:
            print(shape.label())
            continue
        flops = (grid_lib.backward_flops if args.backward else grid_lib.forward_flops)(shape)
        targets = (grid_lib.backward_targets_for(shape) if args.backward
                   else [t for t in [grid_lib.target_for(shape)] if t is not None])
        print(f"{shape.label()}: {flops / 1e12:.3f} TFLOP"
              f"{'; target ' + ', '.join(t.describe() for t in targets) if targets else ''}")
    print(f"{len(shapes)} shapes")
    return 0 if shapes else 2


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.list:
        return list_shapes(args)
    try:
        import torch
    except ImportError as e:
        log(f"compare.py needs PyTorch: {e}")
        return 2
    if not torch.cuda.is_available():
        log("compare.py needs a CUDA GPU: torch.cuda.is_available() is False")
        return 3
    import flashjit_lib as fj
    import reference
    import results
    import timing

    try:
        lib = fj.Library(args.lib)
    except OSError as e:
        log(f"cannot load the flashjit C library {args.lib}: {e}\n"
            "build it first (scripts/bench.sh does), or pass --lib PATH")
        return 2

    torch.set_float32_matmul_precision("highest")  # the reference is true fp32, not TF32
    if args.masks:
        import masks
        return masks.run(torch, fj, lib, args)
    if args.backward:
        import backward
        return backward.run(torch, fj, lib, args)
    if args.decode:
        import decode
        return decode.run(torch, fj, lib, args)
    shapes = selected_shapes(args)
    if not shapes:
        log("no shapes selected (check --dims/--seqlens/--dtypes)")
        return 2
    heads_of = {}
    for shape in shapes:
        heads_of.setdefault(shape.kernel_key, shape.heads)
    log(f"[bench] {len(shapes)} shapes, {len(heads_of)} flashjit kernels, "
        f"{torch.cuda.get_device_name(0)}, flashjit {lib.version()} from {args.lib}")

    start = time.perf_counter()
    try:
        kernels, compile_info = compile_phase(torch, fj, lib, heads_of, args.workers)
    except RuntimeError as e:  # a kernel's first launch faulted: the CUDA context is lost
        log(f"[bench] the compile phase failed, nothing can be measured: {e}")
        return 1

    rows = []
    for i, shape in enumerate(shapes, 1):
        key = shape.kernel_key
        fatal = None
        try:
            row = run_shape(torch, timing, reference, fj, shape, kernels.get(key), args.seed + i)
        except Exception as e:  # one shape's failure is reported in its row, not a crash
            row = failed_row(shape, e)
            if isinstance(e, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
            elif "CUDA error" in str(e):
                fatal = e  # a launch fault poisons the context: every later shape would fail
        if key not in kernels:
            row["flashjit"].setdefault("error", compile_info[key].get("error", "no kernel"))
        row["compile"] = compile_info[key]
        summarize(row, shape)
        rows.append(row)
        log(progress(i, len(shapes), row, time.perf_counter() - start))
        if fatal is not None:
            log(f"[bench] stopping after a CUDA error on {shape.label()}: {fatal}")
            break

    elapsed = time.perf_counter() - start
    env = results.environment(args.commit, lib.version(), timing.METHOD)
    md_path, json_path = results.write(Path(args.out), env, rows, elapsed)
    print(results.markdown(env, rows, elapsed))
    log(f"[bench] done in {elapsed:.0f} s: {md_path} and {json_path} (also latest.md/.json)")
    failed = [r for r in rows if "error" in r["flashjit"] or not r.get("check_ok", True)]
    if failed:
        log(f"[bench] flashjit failed or exceeded the error bound on {len(failed)} shape(s): "
            "see the Notes section")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
