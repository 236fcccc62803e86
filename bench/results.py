"""What a benchmark run writes: the environment it ran in, the markdown tables (one per
dtype; the backward rows' of `--backward`) and the JSON record, under bench/results/<date>-<gpu>-<commit>.{md,json} plus
latest.md / latest.json."""
from __future__ import annotations

import ctypes
import datetime
import json
import re
import shutil
import subprocess
from pathlib import Path

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
    import torch  # here, so that the tables can be rendered (and tested) without torch

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


# ---------------------------------------------------------------- the backward rows

BACKWARD_BACKENDS = ("cudnn", "flash", "efficient")


def _grad_errors(errors: dict | None) -> str:
    if not errors:
        return ""
    return " / ".join(f"{errors[n]:.1e}" for n in ("dq", "dk", "dv"))


def _best_torch_errors(row: dict) -> dict | None:
    """The gradient errors of the row's fastest PyTorch backend (the one the ratio uses)."""
    best = row.get("best_torch")
    return row["torch"][best].get("err") if best else None


def _deterministic_cells(row: dict) -> list[str]:
    """det TFLOP/s (✗ unless its gradients passed the check) and det / default."""
    det = row["deterministic"]
    if "tflops" not in det:
        return ["error", ""]
    mark = "" if det.get("check_ok") else " ✗"
    return [f"{det['tflops']:.0f}{mark}", _ratio(row.get("ratio_deterministic"))]


def backward_table(rows: list[dict]) -> str:
    """The rows; the deterministic columns only where the run measured that kernel (not with
    --no-deterministic)."""
    deterministic = any("deterministic" in r for r in rows)
    head = ("| dqk/dv | seqlen | causal | B×H | flashjit fwd TFLOP/s | flashjit bwd ms "
            "| flashjit bwd TFLOP/s "
            f"{'| det TFLOP/s | det / default ' if deterministic else ''}"
            "| cudnn | flash | efficient | vs best | vs cuDNN "
            "| max err dQ / dK / dV (best torch) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        fj = r["flashjit"]
        dims = str(r["dqk"]) if r["dqk"] == r["dv"] else f"{r['dqk']}/{r['dv']}"
        forward = f"{fj['forward_tflops']:.0f}" if "forward_tflops" in fj else "—"
        if "ms" in fj:
            mark = "" if r.get("check_ok", True) else " ✗"
            backward = [f"{fj['ms']:.3f}", f"{fj['tflops']:.0f}{mark}"]
        else:
            backward = ["error", "—"]
        err = _grad_errors(fj.get("err"))
        torch_err = _grad_errors(_best_torch_errors(r))
        if torch_err:
            err += f" ({torch_err})"
        if deterministic:
            backward += _deterministic_cells(r)
        cells = [dims, str(r["seqlen"]), "yes" if r["causal"] else "no",
                 f"{r['batch']}×{r['heads']}", forward, *backward,
                 *(_tflops(r["torch"].get(b)) for b in BACKWARD_BACKENDS),
                 _ratio(r.get("ratio_best")), _ratio(r.get("ratio_cudnn")), err]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _deterministic_missed(r: dict) -> str:
    t = r["deterministic_target"]
    if t["got"] is not None:
        got = f"{t['got']:.2f}×"
    elif "tflops" not in r["deterministic"]:
        got = "no deterministic backward time"
    else:
        got = "no default backward time"
    return f"- missed: {r['label']}: {t['describe']}, got {got}"


def _backward_targets_section(rows: list[dict]) -> list[str]:
    judged = [(r, t) for r in rows for t in r.get("targets", [])]
    # The deterministic rows make one target, "at every head dim": met when every row is.
    deterministic = [r for r in rows if "deterministic_target" in r]
    if not judged and not deterministic:
        return []
    missed = [(r, t) for r, t in judged if not t["met"]]
    det_missed = [r for r in deterministic if not r["deterministic_target"]["met"]]
    met, total = len(judged) - len(missed), len(judged)
    scope = "16k non-causal, the 23,400-token d64 series"
    if deterministic:
        met, total = met + (not det_missed), total + 1
        scope += (f"; one target: {deterministic[0]['deterministic_target']['describe']} "
                  "on every 16k row, causal and not")
    lines = [f"**Targets of issue 15** ({scope}): {met} of {total} met."]
    for r, t in missed:
        if t["got"] is None:
            got = ("no flashjit backward time" if "tflops" not in r["flashjit"]
                   else "no baseline (the backend refused the shape)")
        elif t["describe"].endswith("TFLOP/s"):
            got = f"{t['got']:.0f} TFLOP/s"
        else:
            got = f"{t['got']:.2f}×"
        lines.append(f"- missed: {r['label']}: {t['describe']}, got {got}")
    lines += [_deterministic_missed(r) for r in det_missed]
    return lines


def _backward_notes(rows: list[dict]) -> list[str]:
    lines = []
    for r in rows:
        fj = r["flashjit"]
        if "error" in fj:
            lines.append(f"- flashjit's backward failed on {r['label']}: {fj['error']}")
        if not r.get("check_ok", True):
            lines.append(f"- flashjit's gradients above the error bound on {r['label']}: "
                         f"dQ / dK / dV {_grad_errors(fj.get('err'))}, largest reference "
                         f"values {_grad_errors(r.get('reference_max'))}")
        lines += _deterministic_notes(r)
    refusals = {}
    for r in rows:
        for backend, entry in r["torch"].items():
            if entry.get("refused"):
                refusals.setdefault((backend, entry["refused"]), []).append(r["label"])
    for (backend, reason), labels in sorted(refusals.items()):
        lines.append(f"- {backend}'s backward refused {len(labels)} shape(s), e.g. "
                     f"{labels[0]}: {reason}")
    return lines


def _deterministic_notes(r: dict) -> list[str]:
    det = r.get("deterministic", {})
    lines = []
    if "error" in det:
        lines.append(f"- flashjit's deterministic backward failed on {r['label']}: "
                     f"{det['error']}")
    if "tflops" in det and not det.get("check_ok"):
        lines.append(f"- flashjit's deterministic gradients above the error bound on "
                     f"{r['label']}: dQ / dK / dV {_grad_errors(det.get('err')) or 'unchecked'}"
                     f", largest reference values {_grad_errors(r.get('reference_max'))}")
    return lines


def _deterministic_legend(rows: list[dict]) -> str:
    if not any("deterministic" in r for r in rows):
        return ""
    return "; det = the same spec with `backward: {deterministic: true}`"


def backward_markdown(env: dict, rows: list[dict], spot: list[dict], elapsed_s: float) -> str:
    """The `--backward` run: the spot check against torch autograd, then the rows."""
    import grad_check

    out = [f"# flashjit backward vs PyTorch SDPA — {env['gpu']}, {env['date']}", "",
           f"commit `{env['commit']}` · flashjit {env['flashjit']} · driver {env['driver']} · "
           f"torch {env['torch']} (CUDA {env['torch_cuda']}, cuDNN {env['cudnn']}) · "
           f"triton {env['triton']} · whole run {elapsed_s:.0f} s", "",
           f"Timing: {env['timing']}, of the backward alone. Backward TFLOP/s count 2.5 × "
           "the forward's FLOPs (DESIGN.md); — = the backend refuses the shape"
           f"{_deterministic_legend(rows)}. See bench/README.md (Backward) for every column.",
           "",
           "## Spot check against torch autograd (fp32)", ""]
    out += [f"- {grad_check.describe(r)}" for r in spot] + [""]
    out += ["## bf16", "", backward_table(rows), ""]
    out += _backward_targets_section(rows)
    notes = _backward_notes(rows)
    if notes:
        out += ["", "## Notes", ""] + notes
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- files

def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def write(out_dir: Path, env: dict, rows: list[dict], elapsed_s: float) -> tuple[Path, Path]:
    return write_files(out_dir, env, rows, elapsed_s, markdown(env, rows, elapsed_s), "")


def write_files(out_dir: Path, env: dict, rows: list[dict], elapsed_s: float, text: str,
                tag: str, extra: dict | None = None) -> tuple[Path, Path]:
    """<date>-<gpu>-<commit><tag>.md (text) and .json (env, rows and the `extra` fields),
    copied to latest<tag>.md / .json; `tag` keeps separate runs apart ("-masks")."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    gpu = _slug(env["gpu"].replace("NVIDIA", ""))
    base = out_dir / f"{stamp}-{gpu}-{_slug(env['commit'])}{tag}"
    md_path, json_path = Path(f"{base}.md"), Path(f"{base}.json")
    md_path.write_text(text)
    record = {"environment": env, "elapsed_s": round(elapsed_s, 1), **(extra or {}),
              "rows": rows}
    json_path.write_text(json.dumps(record, indent=1) + "\n")
    shutil.copyfile(md_path, out_dir / f"latest{tag}.md")
    shutil.copyfile(json_path, out_dir / f"latest{tag}.json")
    return md_path, json_path
