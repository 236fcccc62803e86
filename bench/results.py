"""What a benchmark run writes: the environment it ran in, the markdown tables (one per
dtype) and the JSON record, under bench/results/<date>-<gpu>-<commit>.{md,json} plus
latest.md / latest.json."""
from __future__ import annotations

import ctypes
import datetime
import json
import re
import shutil
import subprocess
from pathlib import Path

import torch

BACKENDS = ("cudnn", "flash", "efficient", "auto")


def _nvidia_smi_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True).stdout.strip()
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def _cuda_driver_api_version() -> int | None:
    try:
        version = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) == 0:
            return version.value
    except OSError:
        pass
    return None


def environment(commit: str, flashjit_version: str, timing_method: str) -> dict:
    props = torch.cuda.get_device_properties(0)
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "commit": commit,
        "gpu": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "l2_cache_mib": round(getattr(props, "L2_cache_size", 0) / 2**20, 1) or None,
        "driver": _nvidia_smi_driver(),
        "cuda_driver_api": _cuda_driver_api_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "triton": triton_version,
        "flashjit": flashjit_version,
        "timing": timing_method,
    }


# ---------------------------------------------------------------- markdown

def _tflops(entry: dict | None) -> str:
    if entry is None:
        return ""
    if "tflops" in entry:
        return f"{entry['tflops']:.0f}"
    return "OOM" if entry.get("oom") else "—"


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}×"


def _err(value: float | None) -> str:
    return "" if value is None else f"{value:.1e}"


def _compile(c: dict | None) -> str:
    if not c or c.get("cold_ms") is None:
        return "—"
    warm = "—" if c.get("warm_ms") is None else f"{c['warm_ms']:.0f}"
    return f"{c['cold_ms']:.0f} / {warm}"


def _flashjit_cells(row: dict) -> list[str]:
    fj = row["flashjit"]
    if "ms" not in fj:
        return ["error", "—"]
    mark = "" if row.get("check_ok", True) else " ✗"
    return [f"{fj['ms']:.3f}", f"{fj['tflops']:.0f}{mark}"]


def table(rows: list[dict]) -> str:
    head = ("| dqk/dv | seqlen | causal | B×H | flashjit ms | flashjit TFLOP/s | cudnn | flash "
            "| efficient | auto | vs best | vs FA2 | max err O (torch) | compile cold / warm ms |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        dims = str(r["dqk"]) if r["dqk"] == r["dv"] else f"{r['dqk']}/{r['dv']}"
        err = _err(r["flashjit"].get("err_o"))
        if r.get("torch_err_o") is not None:
            err += f" ({_err(r['torch_err_o'])})"
        cells = [dims, str(r["seqlen"]), "yes" if r["causal"] else "no",
                 f"{r['batch']}×{r['heads']}", *_flashjit_cells(r),
                 *(_tflops(r["torch"].get(b)) for b in BACKENDS),
                 _ratio(r.get("ratio_best")), _ratio(r.get("ratio_fa2")), err,
                 _compile(r.get("compile"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _targets_section(rows: list[dict]) -> list[str]:
    judged = [r for r in rows if r.get("target")]
    if not judged:
        return []
    missed = [r for r in judged if not r["target"]["met"]]
    lines = [f"**Targets of issue 3** (seqlen 4096/16384): {len(judged) - len(missed)} of "
             f"{len(judged)} met."]
    for r in missed:
        t = r["target"]
        got = "no flashjit time" if t["ratio"] is None else f"{t['ratio']:.2f}×"
        lines.append(f"- missed: {r['label']}: {t['describe']}, got {got}")
    return lines


def _notes_section(rows: list[dict]) -> list[str]:
    lines = []
    for r in rows:
        fj = r["flashjit"]
        if "error" in fj:
            lines.append(f"- flashjit failed on {r['label']}: {fj['error']}")
        if not r.get("check_ok", True):
            lines.append(f"- flashjit error above tolerance on {r['label']}: O {_err(fj.get('err_o'))}"
                         f", LSE {_err(fj.get('err_lse'))} (torch auto: {_err(r.get('torch_err_o'))})")
        for report in (r.get("compile") or {}).get("reports", []):
            spills = report.get("spill_store_bytes", 0) + report.get("spill_load_bytes", 0)
            if spills:
                lines.append(f"- {report['kernel_name']} spills {spills} bytes")
    refusals = {}
    for r in rows:
        for backend, entry in r["torch"].items():
            if entry.get("refused"):
                refusals.setdefault((backend, entry["refused"]), []).append(r["label"])
    for (backend, reason), labels in sorted(refusals.items()):
        lines.append(f"- {backend} refused {len(labels)} shape(s), e.g. {labels[0]}: {reason}")
    return sorted(set(lines), key=lines.index)


def markdown(env: dict, rows: list[dict], elapsed_s: float) -> str:
    out = [f"# flashjit vs PyTorch SDPA — {env['gpu']}, {env['date']}", "",
           f"commit `{env['commit']}` · flashjit {env['flashjit']} · driver {env['driver']} "
           f"(CUDA driver API {env['cuda_driver_api']}) · torch {env['torch']} (CUDA "
           f"{env['torch_cuda']}, cuDNN {env['cudnn']}) · triton {env['triton']} · "
           f"whole run {elapsed_s:.0f} s", "",
           f"Timing: {env['timing']}. Cells are forward TFLOP/s unless marked ms; — = the "
           "backend refuses the shape. See bench/README.md for every column.", ""]
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        dtype_rows = [r for r in rows if r["dtype"] == dtype]
        out += [f"## {dtype}", "", table(dtype_rows), ""]
        targets = _targets_section(dtype_rows)
        if targets:
            out += targets + [""]
    notes = _notes_section(rows)
    if notes:
        out += ["## Notes", ""] + notes + [""]
    return "\n".join(out)


# ---------------------------------------------------------------- files

def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def write(out_dir: Path, env: dict, rows: list[dict], elapsed_s: float) -> tuple[Path, Path]:
    return write_files(out_dir, env, rows, elapsed_s, markdown(env, rows, elapsed_s), "")


def write_files(out_dir: Path, env: dict, rows: list[dict], elapsed_s: float, text: str,
                tag: str) -> tuple[Path, Path]:
    """<date>-<gpu>-<commit><tag>.md (text) and .json (env and rows), copied to
    latest<tag>.md / .json; `tag` keeps separate runs apart ("-masks")."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    gpu = _slug(env["gpu"].replace("NVIDIA", ""))
    base = out_dir / f"{stamp}-{gpu}-{_slug(env['commit'])}{tag}"
    md_path, json_path = Path(f"{base}.md"), Path(f"{base}.json")
    md_path.write_text(text)
    json_path.write_text(json.dumps({"environment": env, "elapsed_s": round(elapsed_s, 1),
                                     "rows": rows}, indent=1) + "\n")
    shutil.copyfile(md_path, out_dir / f"latest{tag}.md")
    shutil.copyfile(json_path, out_dir / f"latest{tag}.json")
    return md_path, json_path
