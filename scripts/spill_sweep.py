#!/usr/bin/env python3
"""Issue 18 item 8: compile head dims x mask x dtype x target with the heuristic tiles
(`flashjit compile --json`, NVRTC only, no GPU) and report every kernel that spills registers
or is refused, so that a spec that validates always gets a kernel.

    scripts/spill_sweep.py OUTDIR --jobs 16        the full grid: every head dim 1..512 and the
                                                   (qk, v) pairs of configs/ x 5 masks x fp16,
                                                   bf16 x sm_80, sm_90a (10,300 kernels)
    scripts/spill_sweep.py OUTDIR --head-dims 1-170 --jobs 16
                                                   a third of it (--head-dims 171-340, then
                                                   341-512,pairs for the rest)
    scripts/spill_sweep.py OUTDIR --head-dims classes
                                                   one head dim per padded class (register use
                                                   follows the head dims padded to 16), and the
                                                   pairs: 700 kernels
    scripts/spill_sweep.py OUTDIR --sample 100     what CI runs: every kernel that once spilled
                                                   (REGRESSIONS; BACKWARD_ and DECODE_ for those
                                                   steps), the corners, then kernels
                                                   drawn from the grid (fixed seed)
    scripts/spill_sweep.py OUTDIR --backward ...   the backward's three kernels a spec instead
                                                   (--deterministic: of specs asking for the
                                                   deterministic backward, whose dK/dV and dQ
                                                   kernels the fused one replaces elsewhere)
    scripts/spill_sweep.py OUTDIR --decode ...     decode's kernels a spec instead (the split
                                                   kernel for 8..64 packed rows, dense and
                                                   paged, the combine and the merge), on
                                                   sm_80, sm_86 and sm_90a, masks none, causal
                                                   and window unless asked otherwise
    scripts/spill_sweep.py OUTDIR --align packed ...
                                                   the kernels densely packed tensors get
                                                   (`compile --align`: rows of 2 x head_dim
                                                   bytes, 8, 4 or 2-byte aligned at head dims
                                                   that are no multiple of 8) instead of
                                                   16-byte aligned ones; a sample holds the
                                                   PACKED_*REGRESSIONS

A kernel takes 1.5-3 s of one core (sm_90a's the longer). OUTDIR/results.jsonl holds one line
per kernel (the spec's fields, the compile report or the error), OUTDIR/problems.txt one line
per kernel that spilled or was refused, and the specs written for the sweep are in
OUTDIR/specs/. Kernels are cached in OUTDIR/kernel-cache, so a second run of the same tree
into the same OUTDIR only reads them back (a run cut short resumes). Exits 1 when any kernel
spilled or was refused, 0 otherwise.
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
# Decode's tiles differ on sm_86 too (99 KB of shared memory); its kernels take no block mask.
DECODE_TARGETS = ("sm_80", "sm_86", "sm_90a")
DECODE_MASKS = ("none", "causal", "window")
# (head_dim_qk, head_dim_v) pairs: every head dim, and the configs/ pairs that differ.
ALL_HEAD_DIMS = [(d, d) for d in range(1, 513)]
CONFIG_PAIRS = [(192, 128), (128, 64), (64, 256)]
# One head dim per padded class (multiples of 16: generator/tile_rules.cpp), the first of it,
# whose loads are masked as an odd head dim's are.
CLASS_HEAD_DIMS = [(d, d) for d in range(1, 513, 16)]
# Always in a sample: the ends of the head-dim range and the sizes around the tile steps
# (192: the backward's paired dK/dV/dQ consumers).
CORNER_HEAD_DIMS = (1, 64, 65, 128, 129, 192, 256, 257, 512)
# Kernels whose heuristic tiles once spilled: always in a sample, so CI keeps them fixed.
# (qk, v, mask, dtype, target); tests/cpu/test_heuristic_spills.cpp compiles most of them too.
REGRESSIONS = [
    (97, 97, "pattern", "fp16", "sm_80"),
    (77, 77, "pattern", "fp16", "sm_80"),
    (80, 80, "pattern", "bf16", "sm_80"),
    (80, 80, "pattern", "bf16", "sm_90a"),
    (33, 33, "pattern", "bf16", "sm_90a"),
    (81, 81, "window", "bf16", "sm_80"),
    (96, 96, "window", "fp16", "sm_80"),
    (96, 96, "block_sparse", "bf16", "sm_80"),
    (33, 33, "causal", "fp16", "sm_80"),
    (34, 34, "causal", "bf16", "sm_80"),
    (192, 128, "pattern", "bf16", "sm_80"),
]
# The same for the backward's sm90 kernels: 128 query rows a step in narrow panels at the
# budget's 208 registers (d65-d80, 64/96), and d64's ordered kernel, which spilled when the
# shared-memory base was taken without its round-up (bench/NOTES.md entry 41).
BACKWARD_REGRESSIONS = [
    (72, 72, "none", "bf16", "sm_90a"),
    (80, 80, "causal", "fp16", "sm_90a"),
    (65, 65, "window", "bf16", "sm_90a"),
    (64, 96, "none", "bf16", "sm_90a"),
    (64, 64, "causal", "bf16", "sm_90a"),
]
# The same for decode's kernels (bench/NOTES.md entry 25).
DECODE_REGRESSIONS = [
    (64, 64, "none", "bf16", "sm_80"),
    (136, 136, "none", "fp16", "sm_86"),
    (128, 64, "none", "bf16", "sm_90a"),
    (8, 8, "none", "bf16", "sm_86"),
    (241, 241, "causal", "bf16", "sm_90a"),
    (256, 256, "causal", "fp16", "sm_90a"),
    (256, 256, "none", "bf16", "sm_90a"),
    (192, 128, "causal", "bf16", "sm_86"),
    (193, 193, "window", "fp16", "sm_90a"),
    (209, 209, "causal", "bf16", "sm_86"),
    (66, 66, "causal", "bf16", "sm_90a"),
    (128, 128, "window", "bf16", "sm_90a"),
]

# The same for the kernels of densely packed tensors of odd head dims (--align packed), whose
# rows of 8, 4 or 2 bytes take several copies a row (bench/NOTES.md entries 39 and 40).
PACKED_REGRESSIONS = [
    (500, 500, "window", "bf16", "sm_80"),
    (500, 500, "block_sparse", "bf16", "sm_80"),
    (511, 511, "window", "bf16", "sm_80"),
    (83, 83, "causal", "bf16", "sm_80"),
]
PACKED_BACKWARD_REGRESSIONS = [
    (20, 20, "causal", "bf16", "sm_80"),
    (36, 36, "causal", "bf16", "sm_80"),
    (59, 59, "none", "bf16", "sm_80"),
]
PACKED_DECODE_REGRESSIONS = [
    (1, 1, "causal", "bf16", "sm_80"),
    (3, 3, "causal", "bf16", "sm_86"),
    (5, 5, "causal", "bf16", "sm_80"),
    (20, 20, "none", "bf16", "sm_80"),
    (20, 20, "none", "bf16", "sm_86"),
    (68, 68, "none", "bf16", "sm_90a"),
]


def regressions_for(step, align):
    """The kernels a sample of `step` ("", "--backward", "--decode") at `align` ("16",
    "packed") always holds."""
    if align == "packed":
        return {"": PACKED_REGRESSIONS, "--backward": PACKED_BACKWARD_REGRESSIONS,
                "--decode": PACKED_DECODE_REGRESSIONS}[step]
    return {"": REGRESSIONS, "--backward": BACKWARD_REGRESSIONS,
            "--decode": DECODE_REGRESSIONS}[step]


def grid(head_dims, masks=MASKS, dtypes=DTYPES, targets=TARGETS):
    return [(qk, v, m, t, a) for qk, v in head_dims for m in masks for t in dtypes
            for a in targets]


def sample(count, seed, kernels, regressions):
    """The regressions, each corner head dim once (in a random combination of mask, dtype
    and target), then random kernels of `kernels`, `count` in all (at least the first two);
    all of them within the masks, dtypes and targets that `kernels` has."""
    rng = random.Random(seed)
    present = {(m, t, a) for _, _, m, t, a in kernels}
    combos = [(m, t, a) for m in MASKS for t in DTYPES for a in DECODE_TARGETS
              if (m, t, a) in present]
    chosen = {r for r in regressions if r[2:] in present}
    chosen |= {(d, d, *rng.choice(combos)) for d in CORNER_HEAD_DIMS}
    rest = sorted(set(kernels) - chosen)
    chosen |= set(rng.sample(rest, max(0, count - len(chosen))))
    return sorted(chosen)


def parse_head_dims(text):
    """"all", "classes", or a list of head dims, ranges, qk/v pairs and the word "pairs" (the
    configs/ pairs): "64,97,100-112,192/128"."""
    if text == "all":
        return ALL_HEAD_DIMS + CONFIG_PAIRS
    if text == "classes":
        return CLASS_HEAD_DIMS + CONFIG_PAIRS
    dims = []
    for part in text.split(","):
        if part == "pairs":
            dims += CONFIG_PAIRS
        elif "/" in part:
            qk, v = part.split("/")
            dims.append((int(qk), int(v)))
        else:
            low, _, high = part.partition("-")
            dims += [(d, d) for d in range(int(low), int(high or low) + 1)]
    return dims


def write_spec(folder, qk, v, mask, dtype, deterministic=False):
    dims = f"hd{qk}" if qk == v else f"qk{qk}_v{v}"
    name = f"sweep_{dims}_{mask}_{dtype}{'_det' if deterministic else ''}"
    head_dims = f"head_dim: {qk}" if qk == v else f"head_dim_qk: {qk}\nhead_dim_v: {v}"
    causal, mask_field = MASKS[mask]
    path = folder / f"{name}.yaml"
    path.write_text(f"name: {name}\n{head_dims}\ndtype: {dtype}\ncausal: {causal}\n"
                    f"mask: {mask_field}\ntiles: auto\n"
                    + ("backward: {deterministic: true}\n" if deterministic else ""))
    return path


def packed_alignment(qk, v, element_bytes=2):
    """The alignment of every row start in densely packed tensors of these head dims: the
    largest power of two up to 16 dividing both rows' bytes."""
    align = 16
    while (qk * element_bytes) % align or (v * element_bytes) % align:
        align //= 2
    return align


def compile_one(cli, spec_path, target, step, env, align):
    """The compile reports of one spec (its forward kernel, or the kernels of `step`:
    "--backward" or "--decode") for rows aligned to `align` bytes as dicts; a single dict
    with "error" set when flashjit refused or failed before reporting."""
    start = time.monotonic()
    command = [cli, "compile", "--json", "--arch", target, "--align", str(align), str(spec_path)]
    run = subprocess.run(command + ([step] if step else []),
                         capture_output=True, text=True, env=env)
    wall_s = round(time.monotonic() - start, 2)
    reports = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    errors = [line for line in run.stderr.splitlines() if line.startswith("flashjit:")
              and "spills registers" not in line]
    results = [{"wall_s": wall_s, "exit": run.returncode, **report} for report in reports]
    if not reports or (run.returncode != 0 and errors):
        results.append({"wall_s": wall_s, "exit": run.returncode,
                        "error": "\n".join(errors) or run.stderr.strip()[-2000:] or "no report"})
    return results


def problem(result):
    """One line naming what is wrong with a kernel, or None."""
    where = (f"qk{result['head_dim_qk']} v{result['head_dim_v']} {result['mask']} "
             f"{result['dtype']} {result['arch']}")
    if "error" in result:
        return f"{where}: refused or failed (exit {result['exit']}): {result['error']}"
    if result.get("spill_store_bytes", 0) or result.get("spill_load_bytes", 0):
        return (f"{where}: {result['kernel_name']} spills {result['spill_store_bytes']} bytes "
                f"stored, {result['spill_load_bytes']} loaded (tiles {result['tiles']})")
    return None


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="A kernel takes 1.5-3 s of one core: on N cores --jobs N compiles N at once.")
    parser.add_argument("outdir", type=pathlib.Path)
    parser.add_argument("--head-dims", default="all",
                        help="all (1..512 and the configs/ pairs), classes (one a padded "
                             "class, and the pairs) or a list such as 64,97,100-112,192/128,pairs")
    parser.add_argument("--masks",
                        help=f"comma-separated, of {', '.join(MASKS)} (default: all; "
                             f"with --decode {','.join(DECODE_MASKS)})")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="default: fp16,bf16")
    parser.add_argument("--targets", help=f"default: {','.join(TARGETS)}; with --decode "
                                          f"{','.join(DECODE_TARGETS)}")
    parser.add_argument("--sample", type=int, default=0,
                        help="compile this many kernels (the regressions and corners first) "
                             "instead of the whole grid")
    parser.add_argument("--seed", type=int, default=18, help="the sample's random seed")
    step = parser.add_mutually_exclusive_group()
    step.add_argument("--backward", action="store_true",
                      help="compile the backward's kernels (compile --backward)")
    step.add_argument("--decode", action="store_true",
                      help="compile decode's kernels (compile --decode)")
    parser.add_argument("--align", choices=["16", "packed"], default="16",
                        help="16: 16-byte aligned rows (default); packed: the alignment densely "
                             "packed tensors of each spec's head dims give")
    parser.add_argument("--deterministic", action="store_true",
                        help="with --backward: specs with backward: {deterministic: true}")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="compiles at once (default: every core)")
    parser.add_argument("--cli", default=str(REPO / "build" / "flashjit"),
                        help="the flashjit program (default: build/flashjit)")
    args = parser.parse_args()
    if args.deterministic and not args.backward:
        parser.error("--deterministic needs --backward (the forward and decode ignore it)")

    masks = (args.masks or ",".join(DECODE_MASKS if args.decode else MASKS)).split(",")
    unknown = sorted(set(masks) - set(MASKS))
    if unknown:
        parser.error(f"unknown masks {unknown}: use {', '.join(MASKS)}")
    targets = (args.targets or ",".join(DECODE_TARGETS if args.decode else TARGETS)).split(",")
    unknown = sorted(set(targets) - set(DECODE_TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}: use {', '.join(DECODE_TARGETS)}")
    step = "--backward" if args.backward else "--decode" if args.decode else ""
    kernels = grid(parse_head_dims(args.head_dims), masks, args.dtypes.split(","), targets)
    if args.sample:
        kernels = sample(args.sample, args.seed, kernels, regressions_for(step, args.align))
    specs = args.outdir / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FLASHJIT_CACHE_DIR=str((args.outdir / "kernel-cache").resolve()))
    env.pop("FLASHJIT_DISABLE_CACHE", None)
    paths = {(qk, v, m, t): write_spec(specs, qk, v, m, t, args.deterministic)
             for qk, v, m, t, _ in kernels}

    print(f"[spill_sweep] {len(kernels)} {step[2:] + ' ' if step else ''}specs x "
          f"targets, {args.jobs} at once, results in {args.outdir}", flush=True)
    problems = []
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool, \
            open(args.outdir / "results.jsonl", "w", buffering=1) as results:
        futures = {pool.submit(compile_one, args.cli, paths[(qk, v, m, t)], a, step, env,
                               16 if args.align == "16" else packed_alignment(qk, v)):
                   (qk, v, m, t, a) for qk, v, m, t, a in kernels}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            qk, v, mask, dtype, arch = futures[future]
            for report in future.result():
                result = {"head_dim_qk": qk, "head_dim_v": v, "mask": mask, "dtype": dtype,
                          "arch": arch, **report}
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
    print(f"[spill_sweep] {len(kernels)} in {time.monotonic() - start:.0f} s: "
          f"{len(problems)} kernels spilled or were refused (listed in "
          f"{args.outdir / 'problems.txt'})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
