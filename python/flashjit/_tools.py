"""The CLI's jobs from Python: compiles without a GPU, bundles, tuning, the cache folder.

Bundles are built and kernels tuned by the `flashjit` program itself (tools/), which the wheel
carries in flashjit/bin/, so Python and the command line build the same bundles.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from . import _core
from ._spec import SpecSource, spec as make_spec

# The program's exit codes (README, "The CLI") as the exception a caller catches.
_EXIT_ERRORS = {1: _core.CompileError, 2: _core.UsageError, 3: _core.NoDeviceError,
                4: _core.CompileError, 5: _core.IoError}


def compile_only(spec: SpecSource, target: str) -> dict:
    """Compiles the spec's forward kernel for `target` ("sm_80", "sm_86", "sm_89", "sm_90a")
    with NVRTC, or takes it from the disk cache, on any machine (no GPU needed), and returns
    its compile report: kernel_name, target, tiles, registers, shared_bytes, spill bytes,
    compile_ms, cache_hit, cache_file (the keys of `flashjit compile --json`)."""
    return _core.compile_only(make_spec(spec), target)


def compile_backward_only(spec: SpecSource, target: str) -> list:
    """compile_only for the backward's kernels (D pre-pass, dK/dV, dQ), in launch order."""
    return _core.compile_backward_only(make_spec(spec), target)


def register_bundle(bundle: Union[str, "os.PathLike[str]", bytes], name: Optional[str] = None) -> None:
    """Registers a kernel bundle (a file from build_bundle or `flashjit build`, or its bytes):
    every kernel then looks there first, before the disk cache and NVRTC. Raises IoError for a
    corrupt bundle, UsageError for one of another generator version."""
    if isinstance(bundle, bytes):
        _core.register_bundle(bundle, name or "<bytes>")
    else:
        _core.register_bundle_file(os.fspath(bundle))


def cache_dir() -> str:
    """The on-disk kernel cache's folder: FLASHJIT_CACHE_DIR, else $XDG_CACHE_HOME/flashjit,
    else ~/.cache/flashjit (flashjit.environment() has every FLASHJIT_* setting)."""
    return _core.environment()["cache_dir"]


def cli_path() -> str:
    """The `flashjit` program: the wheel's copy, else the first on PATH."""
    bundled = Path(__file__).parent / "bin" / "flashjit"
    if bundled.is_file():
        return str(bundled)
    found = shutil.which("flashjit")
    if found is None:
        raise _core.UsageError("flashjit: the `flashjit` program is not in this install "
                               "(flashjit/bin/) nor on PATH")
    return found


def _run_cli(arguments: Sequence[str]) -> str:
    done = subprocess.run([cli_path(), *arguments], capture_output=True, text=True)
    if done.returncode != 0:
        error = _EXIT_ERRORS.get(done.returncode, _core.Error)
        raise error(done.stderr.strip() or f"flashjit {arguments[0]} exited {done.returncode}")
    return done.stdout


def _spec_files(specs: Iterable[SpecSource], folder: str) -> list:
    """Paths of the specs: files as they are, others written as resolved YAML into `folder`."""
    files = []
    for n, source in enumerate(specs):
        if isinstance(source, (str, os.PathLike)) and os.path.isfile(os.fspath(source)):
            files.append(os.fspath(source))
            continue
        path = os.path.join(folder, f"spec{n}.yaml")
        Path(path).write_text(make_spec(source).to_yaml())
        files.append(path)
    return files


def build_bundle(specs: Iterable[SpecSource], output: Union[str, "os.PathLike[str]"], *,
                 archs: Sequence[str] = ("sm_80", "sm_90a"), align: str = "natural",
                 backward: bool = False, tune_db: Optional[str] = None) -> Any:
    """Compiles every spec for every target into one bundle file, as `flashjit build` does
    (it runs that program), and returns the bundle's manifest (a dict). align: "natural"
    (16 bytes and that of packed tensors), "all", or a list such as "16,8". backward: also the
    backward's kernels. tune_db: also every tuned tiling that DB holds. Needs no GPU.
    A kernel that spills registers raises CompileError (the file is still written)."""
    with tempfile.TemporaryDirectory(prefix="flashjit-bundle-") as folder:
        arguments = ["build", *_spec_files(specs, folder), "--arch", ",".join(archs),
                     "--align", align, "-o", os.fspath(output), "--json"]
        if backward:
            arguments.append("--backward")
        if tune_db is not None:
            arguments += ["--tune-db", os.fspath(tune_db)]
        return json.loads(_run_cli(arguments))


def _tune(specs: Iterable[SpecSource], flags: Sequence[str], db: Optional[str],
          budget_s: Optional[float]) -> str:
    """`flashjit tune` of the specs with `flags`; the spec files come first, since the list
    flags take every value that follows them."""
    with tempfile.TemporaryDirectory(prefix="flashjit-tune-") as folder:
        arguments = ["tune", *_spec_files(specs, folder), *flags]
        if db is not None:
            arguments += ["--db", os.fspath(db)]
        if budget_s is not None:
            arguments += ["--budget-s", str(budget_s)]
        return _run_cli(arguments)


def tune(specs: Iterable[SpecSource], *, seqlens: Sequence[int] = (1024, 4096, 16384),
         backward: bool = False, db: Optional[str] = None,
         budget_s: Optional[float] = None) -> str:
    """Runs `flashjit tune` on this machine's GPU for the specs and sequence lengths, writing
    the winners into the tune DB (FLASHJIT_TUNE_DB, else <cache dir>/tune.json, or `db`) that
    kernels then use; returns the program's report. backward: tune the backward's dK/dV and dQ
    tiles instead (`flashjit tune --backward`), which backward calls then use. UsageError for
    a spec that cannot be tuned (a block_sparse mask; for the forward, tiles of its own) before
    any GPU work, NoDeviceError without a GPU."""
    flags = ["--seqlens", ",".join(map(str, seqlens))]
    if backward:
        flags.append("--backward")
    return _tune(specs, flags, db, budget_s)


def tune_decode(specs: Iterable[SpecSource], *, batches: Sequence[int] = (1, 16, 128),
                seqlens_k: Sequence[int] = (4096, 32768, 131072), seqlen_q: int = 1,
                heads: int = 32, heads_kv: int = 8, db: Optional[str] = None,
                budget_s: Optional[float] = None) -> str:
    """Runs `flashjit tune --decode` on this machine's GPU: for every batch x cache length
    (seqlen_q new rows, heads query heads over heads_kv KV heads), times decode's key-split
    counts and records the fastest correct one per decode bucket in the tune DB, which decode
    calls then use; returns the program's report. UsageError for a shape that would not run
    the decode kernels (before any GPU work), NoDeviceError without a GPU."""
    return _tune(specs, ["--decode", "--batches", ",".join(map(str, batches)),
                         "--seqlens-k", ",".join(map(str, seqlens_k)),
                         "--seqlen-q", str(seqlen_q), "--heads", str(heads),
                         "--heads-kv", str(heads_kv)], db, budget_s)
