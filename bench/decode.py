"""The decode rows of issue 16 (`compare.py --decode`): a few new query rows against a long
KV cache, flashjit's decode kernels through the C ABI (dense and paged caches) beside PyTorch
SDPA's cuDNN, FlashAttention-2 and memory-efficient backends (GQA through enable_gqa), in one
run on the same inputs. Each row reports ms and the K/V bandwidth (cache bytes read / time);
flashjit's O is checked against the first PyTorch backend that ran. See bench/README.md
(Decode)."""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from shapes import torch_dtype

BACKENDS = ("cudnn", "flash", "efficient")
# flashjit's O against a PyTorch backend's: both round to bf16 once, so they differ by a few
# bf16 ulps of |O| <= ~1 at most.
CHECK_ATOL = 3e-2
# Rows whose K and V would not fit next to the other backends' work are left out.
MAX_CACHE_BYTES = 24 * 2**30
# Issue 16's targets, set for the H200 in bf16: one query row at least as fast as the fastest
# PyTorch backend, and at 3.4 TB/s (80% of the H200's 4.26 TB/s copy ceiling) where it reads
# 256 MiB of cache or more; a paged cache at 0.9 of the dense call's speed (0.6 at pages of one
# row); short causal prefills (4 to 64 new rows) at least as fast as the fastest backend.
TARGET_RATIO = 1.0
TARGET_TB_S = 3.4
TARGET_BYTES = 256 * 2**20
TARGET_PAGED = 0.9
TARGET_PAGED_ONE_ROW_PAGES = 0.6


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class DecodeShape:
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    dim: int
    causal: bool = False
    page_size: int = 0  # also time flashjit on a cache of pages of this many rows
    source: str = "grid"

    def label(self) -> str:
        causal = " causal" if self.causal else ""
        return (f"b{self.batch} h{self.heads_q}/{self.heads_kv} {self.seqlen_q}x{self.seqlen_k} "
                f"d{self.dim}{causal}")

    def cache_bytes(self) -> int:
        return self.batch * self.seqlen_k * self.heads_kv * 2 * self.dim * 2


def decode_grid(quick: bool) -> list[DecodeShape]:
    """ANCHORS.md's decode table, then batch x cache x head dim x GQA ratio, then short
    prefills; every ANCHORS row and one grid row a head dim also paged (pages of 16, and of
    1 once)."""
    rows = [
        DecodeShape(1, 32, 8, 1, 32768, 128, page_size=16, source="anchors"),
        DecodeShape(8, 32, 8, 1, 8192, 128, page_size=16, source="anchors"),
        DecodeShape(64, 32, 8, 1, 4096, 128, page_size=16, source="anchors"),
        DecodeShape(1, 32, 8, 1, 131072, 128, page_size=1, source="anchors"),
        DecodeShape(16, 32, 8, 4, 16384, 128, causal=True, page_size=16, source="anchors"),
        DecodeShape(4, 8, 1, 1, 65536, 256, page_size=16, source="anchors"),
    ]
    if quick:
        return rows
    for dim in (64, 128, 256):
        for batch in (1, 16, 128):
            for cache in (4096, 32768, 131072):
                for heads_kv in (8, 4):  # GQA 4 and 8 of 32 query heads
                    paged = 16 if (batch, cache, heads_kv) == (16, 32768, 8) else 0
                    shape = DecodeShape(batch, 32, heads_kv, 1, cache, dim, page_size=paged)
                    if shape.cache_bytes() <= MAX_CACHE_BYTES:
                        rows.append(shape)
    rows += [DecodeShape(8, 32, 8, 16, 8192, 128, causal=True, source="prefill"),
             DecodeShape(4, 32, 8, 64, 4096, 128, causal=True, source="prefill")]
    return rows


def _spec(dtype: str, dim: int, causal: bool) -> str:
    return (f"name: dec_d{dim}_{dtype}{'_causal' if causal else ''}\nhead_dim: {dim}\n"
            f"dtype: {dtype}\ncausal: {'true' if causal else 'false'}\n")


def _paged(torch, k, v, page_size: int, gen):
    """k and v [batch, seqlen_k, heads_kv, dim] as pages in a shuffled order, and the block
    table [batch, pages] (int32) that lists each sequence's pages."""
    b, s, h, d = k.shape
    pages = s // page_size
    order = torch.randperm(b * pages, device="cuda", generator=gen)
    table = order.view(b, pages).to(torch.int32)
    paged = []
    for t in (k, v):
        out = torch.empty(b * pages, page_size, h, t.shape[3], dtype=t.dtype, device="cuda")
        out[order] = t.reshape(b * pages, page_size, h, t.shape[3])
        paged.append(out)
    return paged[0], paged[1], table


def _time_sdpa(torch, timing, backend, q, k, v, causal: bool, scale: float):
    from torch.nn.attention import sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    # Decode's causal mask is bottom-right aligned (the new rows are the cache's last);
    # SDPA's is_causal is top-left, so the mask says it.
    mask = causal_lower_right(q.shape[1], k.shape[1]) if causal and q.shape[1] > 1 else None
    try:
        with sdpa_kernel([backend]):
            def fn():
                return sdpa(qt, kt, vt, attn_mask=mask, scale=scale, enable_gqa=True)
            out = fn()
            torch.cuda.synchronize()
            return {"ms": timing.median_ms(fn)}, out.transpose(1, 2)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"oom": True}, None
    except RuntimeError as e:
        return {"refused": " ".join(str(e).split())[:200]}, None


def _kernel(kernels: dict, runtime, shape: DecodeShape, dtype: str):
    """The flashjit kernel of `shape`'s head dim and mask, made once per run."""
    key = (shape.dim, shape.causal)
    if key not in kernels:
        kernels[key] = runtime.kernel(_spec(dtype, shape.dim, shape.causal))
    return kernels[key]


def _workspace(torch):
    return lambda size: torch.empty(size, dtype=torch.uint8, device="cuda")


def prepare_kernels(torch, fj, kernels: dict, runtime, shapes: list, dtype: str) -> None:
    """Makes each shape's flashjit calls once, dense and paged, on uninitialized inputs of the
    shape, before any PyTorch backend runs: every kernel the rows time is compiled here. The
    NVRTC in this process is torch's copy, which cuDNN compiles its own kernels with, and NVRTC
    keeps state from one compile to the next: decode kernels compiled after cuDNN's came out
    different, d256's 4-11% slower (bench/NOTES.md entry 55). A call that fails here fails
    again in its row, which reports it."""
    dt = torch_dtype(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    for i, shape in enumerate(shapes, 1):
        start = time.perf_counter()
        b, sq, sk = shape.batch, shape.seqlen_q, shape.seqlen_k
        q = k = v = o = None
        try:
            kernel = _kernel(kernels, runtime, shape, dtype)
            q = torch.empty(b, sq, shape.heads_q, shape.dim, dtype=dt, device="cuda")
            k, v = (torch.empty(b, sk, shape.heads_kv, shape.dim, dtype=dt, device="cuda")
                    for _ in range(2))
            o = torch.empty_like(q)
            scale = 1.0 / math.sqrt(shape.dim)
            workspace = _workspace(torch)
            kernel.kv_cache_launcher(q, k, v, o, None, scale, stream, sk,
                                     workspace_factory=workspace)()
            if shape.page_size:
                pk, pv, table = _paged(torch, k, v, shape.page_size, gen)
                kernel.kv_cache_launcher(q, pk, pv, o, None, scale, stream, sk,
                                         block_table=table, page_size=shape.page_size,
                                         workspace_factory=workspace)()
                del pk, pv
            torch.cuda.synchronize()
            status = f"{(time.perf_counter() - start) * 1e3:.0f} ms"
        except fj.FlashjitError as e:
            status = str(e).splitlines()[0]
        except torch.cuda.OutOfMemoryError:
            status = "out of memory"
        del q, k, v, o
        torch.cuda.empty_cache()
        log(f"[compile {i}/{len(shapes)}] {shape.label()}: {status}")


def run_shape(torch, timing, fj, kernels: dict, runtime, shape: DecodeShape, dtype: str,
              seed: int) -> dict:
    dt = torch_dtype(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    b, sq, sk = shape.batch, shape.seqlen_q, shape.seqlen_k
    q = torch.randn(b, sq, shape.heads_q, shape.dim, dtype=dt, device="cuda", generator=gen)
    k = torch.randn(b, sk, shape.heads_kv, shape.dim, dtype=dt, device="cuda", generator=gen)
    v = torch.randn(b, sk, shape.heads_kv, shape.dim, dtype=dt, device="cuda", generator=gen)
    scale = 1.0 / math.sqrt(shape.dim)
    row = {"label": shape.label(), "source": shape.source, "dtype": dtype,
           "batch": b, "heads_q": shape.heads_q, "heads_kv": shape.heads_kv, "seqlen_q": sq,
           "seqlen_k": sk, "dim": shape.dim, "causal": shape.causal,
           "cache_bytes": shape.cache_bytes(), "flashjit": {}, "torch": {}}
    kernel = _kernel(kernels, runtime, shape, dtype)
    stream = torch.cuda.current_stream().cuda_stream
    o = torch.empty_like(q)
    workspace = _workspace(torch)
    try:
        launch = kernel.kv_cache_launcher(q, k, v, o, None, scale, stream, sk,
                                          workspace_factory=workspace)
        launch()
        torch.cuda.synchronize()
        row["flashjit"]["ms"] = timing.median_ms(launch)
        got, got_paged = o.clone(), None
        if shape.page_size:
            pk, pv, table = _paged(torch, k, v, shape.page_size, gen)
            paged_launch = kernel.kv_cache_launcher(q, pk, pv, o, None, scale, stream, sk,
                                                    block_table=table,
                                                    page_size=shape.page_size,
                                                    workspace_factory=workspace)
            paged_launch()
            torch.cuda.synchronize()
            row["flashjit"]["paged_ms"] = timing.median_ms(paged_launch)
            row["flashjit"]["page_size"] = shape.page_size
            got_paged = o.clone()
            del pk, pv
    except fj.FlashjitError as e:
        row["flashjit"]["error"] = str(e).splitlines()[0]
        got = None
    from torch.nn.attention import SDPBackend
    members = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}
    for name in BACKENDS:
        entry, out = _time_sdpa(torch, timing, members[name], q, k, v, shape.causal, scale)
        row["torch"][name] = entry
        if got is not None and out is not None and "err" not in row["flashjit"]:
            row["flashjit"]["err"] = (got.float() - out.float()).abs().max().item()
            row["flashjit"]["checked_against"] = name
            if got_paged is not None:
                row["flashjit"]["paged_err"] = (got_paged.float() - out.float()).abs().max().item()
    summarize(row)
    return row


def summarize(row: dict) -> None:
    fj = row["flashjit"]
    gb = row["cache_bytes"] / 1e9
    for entry in (fj, *row["torch"].values()):
        if "ms" in entry:
            entry["tb_s"] = gb / entry["ms"]
    if "paged_ms" in fj:
        fj["paged_tb_s"] = gb / fj["paged_ms"]
        fj["paged_ratio"] = fj["ms"] / fj["paged_ms"]
    timed = {n: e["ms"] for n, e in row["torch"].items() if "ms" in e}
    row["best_torch"] = min(timed, key=timed.get) if timed else None
    row["ratio_best"] = timed[row["best_torch"]] / fj["ms"] if timed and "ms" in fj else None
    # False: flashjit failed or is off; None: no PyTorch backend ran to check it against.
    if "error" in fj:
        row["check_ok"] = False
    elif "err" not in fj:
        row["check_ok"] = None
    else:
        row["check_ok"] = fj["err"] <= CHECK_ATOL and fj.get("paged_err", 0.0) <= CHECK_ATOL
    row["targets"] = targets_for(row)


def targets_for(row: dict) -> list[dict]:
    """Issue 16's targets that apply to `row`, each {"kind", "describe", "got", "met"}; got is
    None where flashjit (or every PyTorch backend, for a ratio) has no time."""
    fj = row["flashjit"]
    targets = []

    def judge(kind: str, describe: str, got, bound: float) -> None:
        targets.append({"kind": kind, "describe": describe, "got": got,
                        "met": got is not None and got >= bound})

    if row["seqlen_q"] == 1:
        judge("one row", f">= {TARGET_RATIO:.1f}x the fastest backend", row.get("ratio_best"),
              TARGET_RATIO)
        if row["cache_bytes"] >= TARGET_BYTES:
            judge("bandwidth", f">= {TARGET_TB_S} TB/s", fj.get("tb_s"), TARGET_TB_S)
    elif 4 <= row["seqlen_q"] <= 64 and row["causal"]:
        judge("prefill", f">= {TARGET_RATIO:.1f}x the fastest backend", row.get("ratio_best"),
              TARGET_RATIO)
    # The issue sets pages of 16 rows and more, and pages of one row; none between.
    page = fj.get("page_size", 0)
    if page == 1 or page >= 16:
        bound = TARGET_PAGED_ONE_ROW_PAGES if page == 1 else TARGET_PAGED
        judge("paged", f"paged (pages of {page}) >= {bound}x dense", fj.get("paged_ratio"),
              bound)
    return targets


def _targets_section(rows: list[dict]) -> list[str]:
    judged = [(r, t) for r in rows for t in r.get("targets", [])]
    if not judged:
        return []
    counts = []
    for kind, describe in (
            ("one row", f"one query row >= {TARGET_RATIO:.1f}x the fastest backend"),
            ("bandwidth", f"one row reading >= {TARGET_BYTES >> 20} MiB at >= {TARGET_TB_S} TB/s"),
            ("paged",
             f"paged >= {TARGET_PAGED}x dense ({TARGET_PAGED_ONE_ROW_PAGES}x at pages of 1)"),
            ("prefill", f"short causal prefills >= {TARGET_RATIO:.1f}x")):
        of_kind = [t for _, t in judged if t["kind"] == kind]
        if of_kind:
            counts.append(f"{describe}: {sum(t['met'] for t in of_kind)} of {len(of_kind)}")
    lines = ["", "**Targets of issue 16** (set for the H200, bf16; each row a target): "
             + "; ".join(counts) + "."]
    for r, t in judged:
        if not t["met"]:
            got = ("no time" if t["got"] is None
                   else f"{t['got']:.2f} TB/s" if t["kind"] == "bandwidth" else f"{t['got']:.3f}x")
            lines.append(f"- missed: {r['label']}: {t['describe']}, got {got}")
    return lines


def _cell(entry: dict) -> str:
    if "ms" in entry:
        return f"{entry['ms']:.3f} ({entry['tb_s']:.2f})"
    return "OOM" if entry.get("oom") else "refused" if "refused" in entry else "-"


def markdown(env: dict, rows: list[dict], elapsed: float) -> str:
    lines = [f"# flashjit decode benchmark, {env['gpu']}, {env['date']}", "",
             f"commit {env['commit']}, flashjit {env['flashjit']}, torch {env['torch']}, "
             f"timing {env['timing']}; {elapsed:.0f} s.", "",
             "ms (K/V TB/s: the cache's bytes over the time). ratio: the fastest PyTorch "
             "backend's ms over flashjit's (>= 1: flashjit faster). paged: flashjit on the "
             "same cache in shuffled pages, and its speed against the dense call.", "",
             "| shape | source | flashjit | paged (page) | paged / dense | cuDNN | FA2 | "
             "efficient | ratio | check |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fj = r["flashjit"]
        paged = (f"{fj['paged_ms']:.3f} ({fj['paged_tb_s']:.2f}) p{fj['page_size']}"
                 if "paged_ms" in fj else "")
        paged_ratio = f"{fj['paged_ratio']:.2f}" if "paged_ratio" in fj else ""
        ratio = f"{r['ratio_best']:.2f}" if r.get("ratio_best") else "-"
        check = ("ok" if r.get("check_ok")
                 else "unchecked (no PyTorch backend ran)" if r.get("check_ok") is None
                 else f"ERR {fj.get('err')} paged {fj.get('paged_err')} {fj.get('error', '')}")
        lines.append(f"| {r['label']} | {r['source']} | {_cell(fj) if 'ms' in fj else fj.get('error', '-')} | "
                     f"{paged} | {paged_ratio} | {_cell(r['torch']['cudnn'])} | "
                     f"{_cell(r['torch']['flash'])} | {_cell(r['torch']['efficient'])} | "
                     f"{ratio} | {check} |")
    lines += _targets_section(rows)
    return "\n".join(lines) + "\n"


def run(torch, fj, lib, args) -> int:
    import results
    import timing

    shapes = decode_grid(args.quick)
    dtype = args.dtypes[0]
    log(f"[decode] {len(shapes)} shapes ({dtype}), {torch.cuda.get_device_name(0)}, flashjit "
        f"{lib.version()} from {args.lib}")
    start = time.perf_counter()
    runtime = fj.Runtime(lib)
    kernels: dict = {}
    rows = []
    try:
        prepare_kernels(torch, fj, kernels, runtime, shapes, dtype)
        for i, shape in enumerate(shapes, 1):
            try:
                row = run_shape(torch, timing, fj, kernels, runtime, shape, dtype, args.seed + i)
            except torch.cuda.OutOfMemoryError as e:
                torch.cuda.empty_cache()
                log(f"[{i}/{len(shapes)}] {shape.label()}: out of memory, left out: "
                    f"{str(e).splitlines()[0]}")
                continue
            rows.append(row)
            fjrow = row["flashjit"]
            log(f"[{i}/{len(shapes)}] {row['label']}: flashjit "
                f"{_cell(fjrow) if 'ms' in fjrow else fjrow.get('error')} | "
                + " ".join(f"{n} {_cell(e)}" for n, e in row["torch"].items())
                + f" | ratio {row['ratio_best'] or 0:.2f} | {time.perf_counter() - start:.0f} s")
            torch.cuda.empty_cache()
    finally:
        for kernel in kernels.values():
            kernel.close()
        runtime.close()
    elapsed = time.perf_counter() - start
    env = results.environment(args.commit, lib.version(), timing.METHOD)
    text = markdown(env, rows, elapsed)
    md_path, json_path = results.write_files(Path(args.out), env, rows, elapsed, text, "-decode")
    print(text)
    log(f"[decode] done in {elapsed:.0f} s: {md_path} and {json_path} (also latest-decode.*)")
    unchecked = [r["label"] for r in rows if r.get("check_ok") is None]
    if unchecked:
        log(f"[decode] unchecked (no PyTorch backend ran): {', '.join(unchecked)}")
    bad = [r for r in rows if r.get("check_ok") is False]
    if bad:
        log(f"[decode] FAILED: flashjit's O off on {len(bad)} row(s)")
        return 1
    return 0
