#!/usr/bin/env python3
"""Two or more builds of flashjit timed against each other in one session on one GPU: runs
bench/compare.py once per build per round, the builds alternating (A B A B), each beside
PyTorch's backends as usual, and writes ab.md beside the runs' results: per row each build's
flashjit time (the median over rounds), its time over the first build's, and its ratio to the
fastest PyTorch backend of its own runs. The first build is the baseline. ab.md is written after
every round, so a run cut short leaves the table of the rounds it finished.

    bench/ab.py --lib main=/tmp/main/build/capi/libflashjit_c.so \\
                --lib work=build/capi/libflashjit_c.so --rounds 2 --out /tmp/ab -- --decode

Arguments after `--` go to every compare.py run (--decode, --backward, --dims, ...). Each
build compiles into its own FLASHJIT_CACHE_DIR (OUT/cache-NAME), so no build is handed the
other's cubins. Exit status: 0 every run succeeded; 1 a run failed (its log names why);
2 bad arguments or a missing library."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

COMPARE = Path(__file__).resolve().parent / "compare.py"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", action="append", required=True, metavar="NAME=PATH",
                        help="a build's libflashjit_c.so; give two or more, the baseline first")
    parser.add_argument("--rounds", type=int, default=2, help="runs of every build (default 2)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs and ab.md")
    parser.add_argument("compare_args", nargs=argparse.REMAINDER,
                        help="after --: arguments of every compare.py run")
    args = parser.parse_args(argv)
    builds = []
    for item in args.lib:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            parser.error(f"--lib {item!r}: expected NAME=PATH")
        builds.append((name, Path(path)))
    if len(builds) < 2:
        parser.error("give at least two builds (--lib NAME=PATH twice)")
    if len({name for name, _ in builds}) != len(builds):
        parser.error("the builds' names must differ")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.builds = builds
    args.compare_args = [a for a in args.compare_args if a != "--"]
    return args


def run_folder(out: Path, name: str, round_index: int) -> Path:
    return out / f"{name}-{round_index + 1}"


def run_once(out: Path, name: str, lib: Path, round_index: int, compare_args: list[str]) -> bool:
    folder = run_folder(out, name, round_index)
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FLASHJIT_CACHE_DIR=str(out / f"cache-{name}"))
    command = [sys.executable, str(COMPARE), "--lib", str(lib), "--commit", name,
               "--out", str(folder), *compare_args]
    print(f"[ab] {name} round {round_index + 1}: {' '.join(command)}", file=sys.stderr, flush=True)
    with open(folder / "compare.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        print(f"[ab] {name} round {round_index + 1} failed (exit {done.returncode}): "
              f"{folder / 'compare.log'}", file=sys.stderr)
    return done.returncode == 0


def load_rows(folder: Path) -> list[dict]:
    """The rows of the one dated .json a compare.py run wrote into folder (not latest*)."""
    found = [p for p in folder.glob("*.json") if not p.name.startswith("latest")]
    if len(found) != 1:
        raise FileNotFoundError(f"{folder}: expected one result .json, found {len(found)}")
    return json.loads(found[0].read_text())["rows"]


# The times a row compares: flashjit's, and a backward row's deterministic kernel's as an
# entry of its own (label suffix, the row's key).
TIMED = (("", "flashjit"), (" deterministic", "deterministic"))


def summarize(runs: dict[str, list[list[dict]]]) -> list[dict]:
    """runs: build name -> its rounds' rows, the baseline first. Per row label (in the
    baseline's order; rows a build lacks are left out for it): each build's median flashjit
    ms, its time over the baseline's and the median of its runs' ratio_best (compare.py's
    ratio to the fastest PyTorch backend). A backward row with a deterministic time gives a
    second entry, "<label> deterministic", without a ratio."""
    names = list(runs)
    return [_entry(runs, row["label"], suffix, key)
            for row in runs[names[0]][0] for suffix, key in TIMED if key in row]


def _entry(runs: dict[str, list[list[dict]]], label: str, suffix: str, key: str) -> dict:
    """summarize's entry for the time under `key` of the rows labelled `label`."""
    names = list(runs)
    entry = {"label": label + suffix, "builds": {}}
    for name in names:
        times, ratios = [], []
        for rows in runs[name]:
            match = next((r for r in rows if r["label"] == label), None)
            ms = (match or {}).get(key, {}).get("ms")
            if not ms:
                continue
            times.append(ms)
            if key == "flashjit" and match.get("ratio_best"):
                ratios.append(match["ratio_best"])
        if times:
            entry["builds"][name] = {
                "ms": statistics.median(times),
                "ratio_best": statistics.median(ratios) if ratios else None}
    base = entry["builds"].get(names[0])
    for build in entry["builds"].values():
        build["vs_base"] = build["ms"] / base["ms"] if base else None
    return entry


def markdown(summary: list[dict], names: list[str], rounds: int, compare_args: list[str]) -> str:
    lines = [f"# A/B: {' vs '.join(names)} ({rounds} rounds, alternating; compare.py "
             f"{' '.join(compare_args) or '(the grid)'})", "",
             "ms: the median of the rounds' flashjit times; x base: that over the first build's "
             "(< 1: faster); vs best: the fastest PyTorch backend's ms over flashjit's, in the "
             "build's own runs.", ""]
    header = ["row"] + [f"{n} ms" for n in names] + [f"{n} x base" for n in names[1:]] + \
             [f"{n} vs best" for n in names]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def cell(value, fmt):
        return format(value, fmt) if value is not None else ""

    for entry in summary:
        builds = entry["builds"]
        cells = [entry["label"]]
        cells += [cell(builds.get(n, {}).get("ms"), ".4f") for n in names]
        cells += [cell(builds.get(n, {}).get("vs_base"), ".3f") for n in names[1:]]
        cells += [cell(builds.get(n, {}).get("ratio_best"), ".2f") for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for name in names[1:]:
        values = [e["builds"][name]["vs_base"] for e in summary
                  if name in e["builds"] and e["builds"][name].get("vs_base")]
        if values:
            lines.append(f"- {name} / {names[0]} time over {len(values)} rows: median "
                         f"{statistics.median(values):.3f}, best {min(values):.3f}, "
                         f"worst {max(values):.3f}")
    return "\n".join(lines) + "\n"


def load_runs(out: Path, names: list[str], rounds: int, quiet: bool) -> dict[str, list[list[dict]]]:
    """Each build's rows of rounds 0..rounds-1 whose run left a result (a failed run leaves
    none: it is left out, and said unless quiet)."""
    runs = {}
    for name in names:
        found = []
        for round_index in range(rounds):
            try:
                found.append(load_rows(run_folder(out, name, round_index)))
            except FileNotFoundError as error:
                if not quiet:
                    print(f"[ab] {error}", file=sys.stderr)
        runs[name] = found
    return runs


def write_table(out: Path, runs: dict[str, list[list[dict]]], rounds: int,
                compare_args: list[str]) -> str | None:
    """ab.md from the runs, if every build has one; returns its text."""
    names = list(runs)
    if not all(runs[name] for name in names):
        return None
    text = markdown(summarize(runs), names, rounds, compare_args)
    (out / "ab.md").write_text(text)
    return text


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    for name, lib in args.builds:
        if not lib.is_file():
            print(f"[ab] {name}: no library at {lib}", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    names = [name for name, _ in args.builds]
    ok = True
    for round_index in range(args.rounds):
        for name, lib in args.builds:
            ok &= run_once(args.out, name, lib, round_index, args.compare_args)
        # The table of the rounds so far after each round, so that a session cut short (a
        # device's time limit) still leaves one.
        if round_index + 1 < args.rounds:
            write_table(args.out, load_runs(args.out, names, round_index + 1, quiet=True),
                        round_index + 1, args.compare_args)
    runs = load_runs(args.out, names, args.rounds, quiet=False)
    ok &= all(len(runs[name]) == args.rounds for name in names)
    text = write_table(args.out, runs, args.rounds, args.compare_args)
    if text:
        print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
