"""Kernel timing: median of many runs after a warm-up, CUDA events, L2 flushed between runs.
Triton's do_bench does exactly that (and the anchors in ANCHORS.md were measured with it);
where Triton cannot be imported, a small equivalent built on torch's CUDA events is used and
the results say so."""
from __future__ import annotations

from typing import Callable

import torch

WARMUP_MS = 25
REP_MS = 100

try:
    from triton.testing import do_bench as _triton_do_bench
    METHOD = f"triton.testing.do_bench(warmup={WARMUP_MS}, rep={REP_MS}, return_mode='median')"
except ImportError:  # the GPU machine has Triton; this keeps the harness usable without it
    _triton_do_bench = None
    METHOD = (f"CUDA events, warm-up {WARMUP_MS} ms, {REP_MS} ms of runs, L2 flushed "
              "between runs, median (Triton not importable)")

_L2_FLUSH_BYTES = 256 << 20  # larger than any current GPU's L2


def _events_median_ms(fn: Callable[[], object]) -> float:
    flush = torch.empty(_L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    fn()
    torch.cuda.synchronize()
    # Estimate one run to turn the millisecond budgets into run counts, as do_bench does.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(WARMUP_MS / estimate))):
        fn()
    runs = max(1, int(REP_MS / estimate))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for s, e in zip(starts, ends):
        flush.zero_()  # outside the timed region
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2]


def median_ms(fn: Callable[[], object]) -> float:
    if _triton_do_bench is not None:
        return float(_triton_do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median"))
    return _events_median_ms(fn)
