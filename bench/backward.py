"""The backward rows of issue 15 (`compare.py --backward`): per shape, flashjit's backward
through the C ABI beside PyTorch SDPA's cuDNN, FlashAttention-2 and memory-efficient
backwards, in one run on the same inputs, each timed alone (the forward that made O and LSE,
or the autograd graph, is outside the timing). flashjit's forward time is in the row too, and
(unless --no-deterministic) the backward of the kernel whose spec asks for
`backward: {deterministic: true}`. Gradients of flashjit and of each PyTorch backend are
checked against fp32 autograd on three sampled heads, and the run starts with
bench/grad_check.py's spot check. See bench/README.md (Backward)."""
from __future__ import annotations

import dataclasses
import math
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import shapes as grid_lib

BACKENDS = ("cudnn", "flash", "efficient")
# The error flag of a row, a sanity check as the forward rows' (tests/gpu is the authority):
# flashjit's max error of each gradient within 4x the most accurate PyTorch backend's, and
# never held below the rounding of the exact gradient to bf16 (2^-8 of its largest value).
GRAD_ERROR_FACTOR = 4.0
GRAD_ERROR_FLOOR = 2.0 ** -8
# The first calls run on these small inputs (the shapes' heads and head dims, hence the same
# alignment variants) in a thread pool, so that NVRTC compiles the kernels in parallel.
COMPILE_SEQLEN = 128
# The row entries of flashjit's kernels: the default spec's, and the deterministic one's.
FLASHJIT_ENTRIES = ("flashjit", "deterministic")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class FlashjitCall:
    """flashjit's forward and backward launches on one set of tensors: the forward writes O
    and LSE, the backward dQ, dK, dV (NaN before the first call, so an unwritten element
    shows as an error) with a workspace tensor of the size the C ABI asks for."""

    def __init__(self, torch, kernel, q, k, v, d_o, scale: float):
        b, sq, h, _ = q.shape
        self._torch, self._kernel, self._scale = torch, kernel, scale
        self._stream = torch.cuda.current_stream().cuda_stream
        self.o = torch.empty(b, sq, h, v.shape[3], dtype=q.dtype, device="cuda")
        self.lse = torch.empty(b, h, sq, dtype=torch.float32, device="cuda")
        self.grads = tuple(torch.full_like(t, math.nan) for t in (q, k, v))
        self._tensors = (q, k, v, self.o, self.lse, d_o, *self.grads)
        self.forward = kernel.launcher(q, k, v, self.o, self.lse, scale, self._stream)

    def backward(self):
        """The backward's launcher, its workspace allocated first."""
        size = self._kernel.backward_workspace_bytes(*self._tensors, self._scale)
        workspace = (self._torch.empty(size, dtype=self._torch.uint8, device="cuda")
                     if size else None)
        return self._kernel.backward_launcher(*self._tensors, self._scale, self._stream,
                                              workspace)


# ---------------------------------------------------------------- the first calls

def kernel_keys(shape: grid_lib.Shape, deterministic: bool) -> dict:
    """{row entry: kernel key} of the flashjit kernels a row measures: the default spec's, and
    with `deterministic` the same spec asking for the deterministic backward."""
    keys = {"flashjit": shape.kernel_key}
    if deterministic:
        keys["deterministic"] = dataclasses.replace(shape.kernel_key, deterministic=True)
    return keys


def _first_calls(torch, fj, runtime, key: grid_lib.KernelKey, shape: grid_lib.Shape) -> tuple:
    """(kernel or None, info): the kernel of `key` after one forward and one backward on
    small inputs of `shape`'s heads; info holds the wall ms of both, or the error of the one
    that failed."""
    dt = grid_lib.torch_dtype(torch, shape.dtype)
    h, s = shape.heads, COMPILE_SEQLEN
    q, k = (torch.randn(1, s, h, shape.dqk, dtype=dt, device="cuda") for _ in range(2))
    v, d_o = (torch.randn(1, s, h, shape.dv, dtype=dt, device="cuda") for _ in range(2))
    try:
        kernel = runtime.kernel(key.spec_yaml())
    except fj.FlashjitError as e:
        return None, {"error": str(e)}
    info = {}
    call = FlashjitCall(torch, kernel, q, k, v, d_o, 1.0 / math.sqrt(shape.dqk))
    try:
        start = time.perf_counter()
        call.forward()
        torch.cuda.synchronize()
        info["forward_first_ms"] = (time.perf_counter() - start) * 1e3
    except fj.FlashjitError as e:
        kernel.close()
        return None, {"error": str(e)}
    try:
        start = time.perf_counter()
        call.backward()()
        torch.cuda.synchronize()
        info["backward_first_ms"] = (time.perf_counter() - start) * 1e3
    except fj.FlashjitError as e:
        info["backward_error"] = str(e)  # the rows report it; the forward still serves O
    return kernel, info


def prepare_kernels(torch, fj, runtime, shapes: list, workers: int,
                    deterministic: bool) -> tuple[dict, dict]:
    """({kernel key: kernel}, {kernel key: first-call info}) for every shape's kernels
    (kernel_keys), the first calls made in a thread pool (ctypes releases the GIL: NVRTC runs
    in parallel)."""
    firsts = {}
    for shape in shapes:
        for key in kernel_keys(shape, deterministic).values():
            firsts.setdefault(key, shape)
    kernels, info = {}, {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        calls = {key: pool.submit(_first_calls, torch, fj, runtime, key, shape)
                 for key, shape in firsts.items()}
        for done, (key, future) in enumerate(calls.items(), 1):
            kernel, info[key] = future.result()
            if kernel is not None:
                kernels[key] = kernel
            first = info[key]
            if "error" in first:
                status = first["error"].splitlines()[0]
            elif "backward_error" in first:
                status = (f"forward {first['forward_first_ms']:.0f} ms; backward: "
                          f"{first['backward_error'].splitlines()[0]}")
            else:
                status = (f"forward {first['forward_first_ms']:.0f} ms, backward "
                          f"{first['backward_first_ms']:.0f} ms")
            log(f"[compile {done}/{len(calls)}] {key.name}: {status}")
    torch.cuda.synchronize()
    return kernels, info


# ---------------------------------------------------------------- one shape

def _time_sdpa_backward(torch, timing, backend, q, k, v, d_o, causal: bool, scale: float,
                        flops: int):
    """({"ms", "tflops"} | {"refused": reason} | {"oom": True, ...}, (dq, dk, dv) or None).
    The forward runs once under sdpa_kernel([backend]) (which picks the backward too); the
    timed call is the backward alone, torch.autograd.grad with the graph retained."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    try:
        with sdpa_kernel([backend]), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # SDPA takes [batch, heads, seqlen, dim]: transposed views of the same memory.
            out = sdpa(*(t.transpose(1, 2) for t in leaves), is_causal=causal, scale=scale)
            # dO in the output's own strides, as training hands it over (a backend may copy
            # a dO whose layout differs from O's, which would be timed).
            d_out = torch.empty_like(out).copy_(d_o.transpose(1, 2))

            def fn():
                return torch.autograd.grad(out, leaves, d_out, retain_graph=True)

            grads = fn()
            torch.cuda.synchronize()
            ms = timing.median_ms(fn)
        return {"ms": ms, "tflops": flops / ms / 1e9}, grads
    except torch.cuda.OutOfMemoryError as e:
        torch.cuda.empty_cache()
        return {"oom": True, "error": str(e).splitlines()[0]}, None
    except RuntimeError as e:
        # A backend that cannot serve the shape raises "No available kernel" after warning
        # why (one warning per reason); a backward that fails raises its own message.
        reasons = list(dict.fromkeys(str(w.message).strip() for w in caught))
        reason = " ".join(reasons) or str(e).splitlines()[0]
        return {"refused": " ".join(reason.split())[:300]}, None


def new_row(shape: grid_lib.Shape) -> dict:
    return {"label": shape.label(), "dtype": shape.dtype, "dqk": shape.dqk, "dv": shape.dv,
            "seqlen": shape.seqlen, "causal": shape.causal, "batch": shape.batch,
            "heads": shape.heads, "forward_flops": grid_lib.forward_flops(shape),
            "flops": grid_lib.backward_flops(shape), "flashjit": {}, "torch": {}}


def _time_backward(torch, timing, fj, kernel, call: FlashjitCall, entry: dict, flops: int):
    """Times `call`'s backward alone into `entry`, its O and LSE already written; returns
    (dq, dk, dv) or None."""
    try:
        backward = call.backward()
        start = time.perf_counter()
        backward()  # may compile a variant the small first call did not need
        torch.cuda.synchronize()
        entry["first_ms"] = (time.perf_counter() - start) * 1e3
        ms = timing.median_ms(backward)
        entry["ms"] = ms
        entry["tflops"] = flops / ms / 1e9
        entry["variants"] = len(kernel.reports()["reports"])
    except fj.FlashjitError as e:
        entry["error"] = str(e)
        return None
    return call.grads


def _run_flashjit(torch, timing, fj, kernel, row: dict, q, k, v, d_o, scale: float):
    """Times flashjit's forward, then its backward alone; returns (dq, dk, dv) or None."""
    fjrow = row["flashjit"]
    call = FlashjitCall(torch, kernel, q, k, v, d_o, scale)
    try:
        call.forward()
        torch.cuda.synchronize()
        ms = timing.median_ms(call.forward)
        fjrow["forward_ms"] = ms
        fjrow["forward_tflops"] = row["forward_flops"] / ms / 1e9
    except fj.FlashjitError as e:
        fjrow["error"] = f"forward: {e}"
        return None
    # The timed forwards left O and LSE of these inputs: the backward's inputs.
    return _time_backward(torch, timing, fj, kernel, call, fjrow, row["flops"])


def _run_deterministic(torch, timing, fj, kernel, row: dict, q, k, v, d_o, scale: float):
    """Times the deterministic kernel's backward alone, as _run_flashjit times the default's,
    after one untimed forward of its own (the forward ignores the backward's field) wrote O
    and LSE; returns (dq, dk, dv) or None."""
    entry = row["deterministic"]
    call = FlashjitCall(torch, kernel, q, k, v, d_o, scale)
    try:
        call.forward()
    except fj.FlashjitError as e:
        entry["error"] = f"forward: {e}"
        return None
    return _time_backward(torch, timing, fj, kernel, call, entry, row["flops"])


def run_shape(torch, timing, reference, fj, shape: grid_lib.Shape, kernels: dict,
              seed: int) -> dict:
    """One row; `kernels` maps each flashjit entry the row measures (kernel_keys) to its
    kernel, None where it has none (the caller records why)."""
    row = new_row(shape)
    dt = grid_lib.torch_dtype(torch, shape.dtype)
    b, s, h = shape.batch, shape.seqlen, shape.heads
    scale = 1.0 / math.sqrt(shape.dqk)
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(d):
        return torch.randn(b, s, h, d, dtype=dt, device="cuda", generator=gen)

    q, k, v, d_o = randn(shape.dqk), randn(shape.dqk), randn(shape.dv), randn(shape.dv)
    grads = {}
    runners = {"flashjit": _run_flashjit, "deterministic": _run_deterministic}
    for name, kernel in kernels.items():
        row.setdefault(name, {})  # "deterministic" is in the rows of runs that measure it
        if kernel is not None:
            got = runners[name](torch, timing, fj, kernel, row, q, k, v, d_o, scale)
            if got is not None:
                grads[name] = got
    # The grid's seqlen_q == seqlen_k: SDPA's top-left is_causal equals bottom-right causal.
    from torch.nn.attention import SDPBackend
    members = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}
    for name in BACKENDS:
        entry, got = _time_sdpa_backward(torch, timing, members[name], q, k, v, d_o,
                                         shape.causal, scale, row["flops"])
        row["torch"][name] = entry
        if got is not None:
            grads[name] = got
    if grads:
        errors = reference.check_grads_heads(q, k, v, d_o, scale, shape.causal, grads)
        row["reference_max"] = errors.pop("reference")
        for name, err in errors.items():
            (row[name] if name in FLASHJIT_ENTRIES else row["torch"][name])["err"] = err
    return row


def failed_row(shape: grid_lib.Shape, error: Exception, names) -> dict:
    """The row of a shape that raised: each flashjit entry of `names` says so."""
    row = new_row(shape)
    message = f"shape aborted: {type(error).__name__}: {str(error).splitlines()[0]}"
    for name in names:
        row[name] = {"error": message}
    return row


def _target_ratio(target: grid_lib.Target, fj: float, timed: dict) -> float | None:
    """flashjit's TFLOP/s over the target's baseline, or itself for an absolute target: the
    target is met when this is >= target.factor."""
    if target.baseline == "tflops":
        return fj
    base = max(timed.values(), default=None) if target.baseline == "best" else timed.get(
        target.baseline)
    return fj / base if base else None


def _grads_ok(err: dict, row: dict) -> bool:
    """The row's error flag rule (GRAD_ERROR_FACTOR, GRAD_ERROR_FLOOR) on one gradient set."""
    torch_errs = [e["err"] for e in row["torch"].values() if "err" in e]
    return all(
        err[n] <= max(GRAD_ERROR_FACTOR * min((t[n] for t in torch_errs), default=0.0),
                      GRAD_ERROR_FLOOR * row["reference_max"][n])
        for n in err)


def _summarize_deterministic(row: dict, shape: grid_lib.Shape) -> None:
    """The deterministic entry's error flag (False where it ran but was not checked: only a
    passed check counts), its ratio to the default and, on the 16k rows, its target."""
    det = row["deterministic"]
    if "tflops" in det:
        det["check_ok"] = "err" in det and _grads_ok(det["err"], row)
    fj = row["flashjit"].get("tflops")
    ratio = det["tflops"] / fj if fj and "tflops" in det else None
    row["ratio_deterministic"] = ratio
    if grid_lib.deterministic_target_applies(shape):
        row["deterministic_target"] = {
            "describe": grid_lib.DETERMINISTIC_TARGET, "got": ratio,
            "met": ratio is not None and ratio >= grid_lib.DETERMINISTIC_FACTOR}


def summarize(row: dict, shape: grid_lib.Shape) -> None:
    """Adds the ratios, issue 15's target verdicts and the gradient error flags to `row`."""
    fj = row["flashjit"].get("tflops")
    timed = {n: e["tflops"] for n, e in row["torch"].items() if "tflops" in e}
    best = max(timed.values(), default=None)
    row["best_torch"] = max(timed, key=timed.get) if timed else None
    row["ratio_best"] = fj / best if fj and best else None
    row["ratio_cudnn"] = fj / timed["cudnn"] if fj and "cudnn" in timed else None
    verdicts = []
    for target in grid_lib.backward_targets_for(shape):
        got = _target_ratio(target, fj, timed) if fj else None
        verdicts.append({"describe": target.describe(), "got": got,
                         "met": got is not None and got >= target.factor})
    if verdicts:
        row["targets"] = verdicts
    fj_err = row["flashjit"].get("err")
    if fj_err is not None:
        row["check_ok"] = _grads_ok(fj_err, row)
    if "deterministic" in row:
        _summarize_deterministic(row, shape)


def progress(i: int, n: int, row: dict, elapsed: float) -> str:
    fj = row["flashjit"]
    if "tflops" in fj:
        ratio = f" ({row['ratio_best']:.2f}x best)" if row.get("ratio_best") else ""
        head = f"flashjit bwd {fj['ms']:.3f} ms {fj['tflops']:.0f} TF/s{ratio}"
    else:
        head = f"flashjit {fj.get('error', 'not run').splitlines()[0][:100]}"
    torch_part = " ".join(
        f"{n} {e['tflops']:.0f}" if "tflops" in e else f"{n} {'OOM' if e.get('oom') else '-'}"
        for n, e in row["torch"].items())
    return (f"[{i}/{n}] {row['label']}: {head}{_deterministic_progress(row)} | {torch_part} "
            f"| {elapsed:.0f} s")


def _deterministic_progress(row: dict) -> str:
    det = row.get("deterministic")
    if det is None:
        return ""
    if "tflops" not in det:
        return f"; det {det.get('error', 'not run').splitlines()[0][:100]}"
    ratio = f" ({row['ratio_deterministic']:.2f}x)" if row.get("ratio_deterministic") else ""
    return f"; det {det['tflops']:.0f} TF/s{ratio}"


# ---------------------------------------------------------------- the run

def _deterministic_problems(rows: list[dict]) -> list[str]:
    """What fails the run about the deterministic kernel: a row whose gradients did not pass
    the check (failed, or not checked), or a row it did not run on."""
    dets = [r["deterministic"] for r in rows]
    served = [d for d in dets if "tflops" in d]
    failed = [d for d in served if not d.get("check_ok")]
    problems = []
    if failed:
        problems.append(f"the deterministic backward's gradients are over the error bound or "
                        f"unchecked on {len(failed)} row(s)")
    if len(served) < len(dets):
        problems.append(f"flashjit's deterministic backward ran on {len(served)} of "
                        f"{len(dets)} rows")
    return problems


def run(torch, fj, lib, args) -> int:
    """The whole backward benchmark; returns compare.py's exit status."""
    import grad_check
    import reference
    import results
    import timing

    shapes = grid_lib.backward_grid(args.dims, args.seqlens, args.quick)
    start = time.perf_counter()
    log(f"[backward] spot check against torch autograd ({len(grad_check.SPOT_CASES)} cases)")
    spot = grad_check.run_cases(torch, fj, lib, grad_check.SPOT_CASES, log)
    log(f"[backward] {len(shapes)} shapes, {torch.cuda.get_device_name(0)}, flashjit "
        f"{lib.version()} from {args.lib}")
    runtime = fj.Runtime(lib)
    deterministic = not args.no_deterministic
    try:
        kernels, first_calls = prepare_kernels(torch, fj, runtime, shapes, args.workers,
                                               deterministic)
    except RuntimeError as e:  # a first launch faulted: the CUDA context is lost
        log(f"[backward] the first calls failed, nothing can be measured: {e}")
        return 1
    finally:
        runtime.close()  # kernels outlive their runtime
    rows = []
    try:
        for i, shape in enumerate(shapes, 1):
            keys = kernel_keys(shape, deterministic)
            fatal = None
            try:
                row = run_shape(torch, timing, reference, fj, shape,
                                {name: kernels.get(key) for name, key in keys.items()},
                                args.seed + i)
            except Exception as e:  # one shape's failure is reported in its row, not a crash
                row = failed_row(shape, e, keys)
                if isinstance(e, torch.cuda.OutOfMemoryError):
                    torch.cuda.empty_cache()
                elif "CUDA error" in str(e):
                    fatal = e  # a launch fault poisons the context: every later shape fails
            for name, key in keys.items():
                if key not in kernels:
                    row[name].setdefault("error", first_calls[key].get("error", "no kernel"))
            row["first_calls"] = first_calls[keys["flashjit"]]
            if deterministic:
                row["deterministic"]["first_calls"] = first_calls[keys["deterministic"]]
            summarize(row, shape)
            rows.append(row)
            log(progress(i, len(shapes), row, time.perf_counter() - start))
            if fatal is not None:
                log(f"[backward] stopping after a CUDA error on {shape.label()}: {fatal}")
                break
    finally:
        for kernel in kernels.values():
            kernel.close()

    elapsed = time.perf_counter() - start
    env = results.environment(args.commit, lib.version(), timing.METHOD)
    text = results.backward_markdown(env, rows, spot, elapsed)
    md_path, json_path = results.write_files(Path(args.out), env, rows, elapsed, text,
                                             "-backward", extra={"spot_check": spot})
    print(text)
    log(f"[backward] done in {elapsed:.0f} s: {md_path} and {json_path} (also latest-backward.*)")
    spot_status = grad_check.exit_status(spot)
    failed = [r for r in rows if not r.get("check_ok", True)]
    served = [r for r in rows if "tflops" in r["flashjit"]]
    problems = []
    if spot_status:
        problems.append("the spot check " + ("failed" if spot_status == 1
                                             else "found flashjit's backward not served"))
    if failed:
        problems.append(f"flashjit's gradients are over the error bound on {len(failed)} row(s)")
    if len(served) < len(rows):
        problems.append(f"flashjit's backward ran on {len(served)} of {len(rows)} rows")
    if deterministic:
        problems += _deterministic_problems(rows)
    if problems:
        log(f"[backward] FAILED: {'; '.join(problems)} (the Notes section says why)")
        return 1
    return 0
