#!/usr/bin/env python3
"""Issue 18 item 8: compile every head dim 1..512 x mask x dtype x target with the heuristic
tiles (`flashjit compile --json`, NVRTC only, no GPU) and report every kernel that spills
registers or is refused, so that a spec that validates always gets a kernel.

    scripts/spill_sweep.py OUTDIR                  the full sweep (10,240 kernels): run it on
                                                   the GPU machine's 16 cores (--jobs 16)
    scripts/spill_sweep.py OUTDIR --sample 24      24 kernels drawn (fixed seed) from the grid,
                                                   the corners always among them: what CI runs

OUTDIR/results.jsonl holds one line per kernel (the spec's fields, the compile report or the
error), OUTDIR/problems.txt one line per kernel that spilled or was refused, and the specs
written for the sweep are in OUTDIR/specs/. Kernels are cached in OUTDIR/kernel-cache, so a
second run of the same tree only reads them back. Exits 1 when any kernel spilled or was
refused, 0 otherwise.
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import random
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent

# The masks of the grid, each as the spec's `causal` and `mask` fields (configs/README.md).
MASKS = {
    "none": ("false", "none"),
    "causal": ("true", "none"),
    "window": ("false", "{sliding_window: {left: 253, right: 61}}"),
    "block_sparse": ("false", "{block_sparse: {block_q: 128, block_k: 128}}"),
    "pattern": ("false", "{pattern: {kind: global_local, block: 64, global_blocks: 2, "
                         "window_blocks: 3}}"),
}
DTYPES = ("fp16", "bf16")
TARGETS = ("sm_80", "sm_90a")
HEAD_DIMS = range(1, 513)
# Always in a sample: the ends of the head-dim range and the sizes around the tile steps.
CORNER_HEAD_DIMS = (1, 64, 65, 128, 129, 256, 257, 512)


def all_kernels():
    return [(d, m, t, a) for d in HEAD_DIMS for m in MASKS for t in DTYPES for a in TARGETS]


def sample(count, seed):
    """`count` kernels of the grid: each corner head dim once (while count allows), in a random
    combination of mask, dtype and target, then random kernels of the rest."""
    rng = random.Random(seed)
    combos = [(m, t, a) for m in MASKS for t in DTYPES for a in TARGETS]
    chosen = {(d, *rng.choice(combos)) for d in CORNER_HEAD_DIMS[:count]}
    rest = [k for k in all_kernels() if k not in chosen]
    chosen |= set(rng.sample(rest, max(0, count - len(chosen))))
    return sorted(chosen)


def write_spec(folder, head_dim, mask, dtype):
    name = f"sweep_hd{head_dim}_{mask}_{dtype}"
    causal, mask_field = MASKS[mask]
    path = folder / f"{name}.yaml"
    path.write_text(f"name: {name}\nhead_dim: {head_dim}\ndtype: {dtype}\ncausal: {causal}\n"
                    f"mask: {mask_field}\ntiles: auto\n")
    return path


def compile_one(cli, spec_path, target, env):
    """The compile report as a dict, with "error" set when flashjit refused or failed."""
    start = time.monotonic()
    run = subprocess.run([cli, "compile", "--json", "--arch", target, str(spec_path)],
                         capture_output=True, text=True, env=env)
    result = {"wall_s": round(time.monotonic() - start, 2), "exit": run.returncode}
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if lines:
        result.update(json.loads(lines[-1]))
    errors = [line for line in run.stderr.splitlines() if line.startswith("flashjit:")]
    if not lines or (run.returncode != 0 and errors and "spills registers" not in errors[-1]):
        result["error"] = "\n".join(errors) or run.stderr.strip()[-2000:] or "no report"
    return result


def problem(result):
    """One line naming what is wrong with a kernel, or None."""
    where = f"hd{result['head_dim']} {result['mask']} {result['dtype']} {result['arch']}"
    if "error" in result:
        return f"{where}: refused or failed (exit {result['exit']}): {result['error']}"
    if result.get("spill_store_bytes", 0) or result.get("spill_load_bytes", 0):
        return (f"{where}: {result['kernel_name']} spills {result['spill_store_bytes']} bytes "
                f"stored, {result['spill_load_bytes']} loaded (tiles {result['tiles']})")
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=pathlib.Path)
    parser.add_argument("--sample", type=int, default=0,
                        help="compile this many kernels of the grid instead of all of it")
    parser.add_argument("--seed", type=int, default=18, help="the sample's random seed")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="compiles at once (default: every core)")
    parser.add_argument("--cli", default=str(REPO / "build" / "flashjit"),
                        help="the flashjit program (default: build/flashjit)")
    args = parser.parse_args()

    kernels = sample(args.sample, args.seed) if args.sample else all_kernels()
    specs = args.outdir / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FLASHJIT_CACHE_DIR=str((args.outdir / "kernel-cache").resolve()))
    env.pop("FLASHJIT_DISABLE_CACHE", None)
    paths = {(d, m, t): write_spec(specs, d, m, t) for d, m, t, _ in kernels}

    print(f"[spill_sweep] {len(kernels)} kernels, {args.jobs} at once, "
          f"results in {args.outdir}", flush=True)
    problems = []
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool, \
            open(args.outdir / "results.jsonl", "w") as results:
        futures = {pool.submit(compile_one, args.cli, paths[(d, m, t)], a, env): (d, m, t, a)
                   for d, m, t, a in kernels}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            head_dim, mask, dtype, arch = futures[future]
            result = {"head_dim": head_dim, "mask": mask, "dtype": dtype, "arch": arch,
                      **future.result()}
            results.write(json.dumps(result) + "\n")
            line = problem(result)
            if line:
                problems.append(line)
                print(f"[spill_sweep] {line}", flush=True)
            if done % 100 == 0:
                print(f"[spill_sweep] {done}/{len(kernels)} compiled, {len(problems)} "
                      f"problems, {time.monotonic() - start:.0f} s", flush=True)
    problems.sort()
    (args.outdir / "problems.txt").write_text("".join(line + "\n" for line in problems))
    print(f"[spill_sweep] {len(kernels)} kernels in {time.monotonic() - start:.0f} s: "
          f"{len(problems)} spilled or refused (listed in {args.outdir / 'problems.txt'})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
