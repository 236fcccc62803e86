#!/usr/bin/env python3
"""CPU tests of the decode benchmark (bench/decode.py): which of issue 16's targets a row is
judged against and the section that ends the table, on rows made up here; and the calls made
before any PyTorch backend runs, on a stand-in for torch and the flashjit library. Needs no
torch and no GPU.

    test_bench_decode.py [unittest arguments]"""
from __future__ import annotations

import io
import sys
import types
import unittest
from contextlib import redirect_stderr
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import decode  # noqa: E402


def made_up_row(shape: decode.DecodeShape, fj_ms: float | None, torch_ms: dict,
                paged_ms: float | None = None) -> dict:
    """A row as run_shape leaves it before summarize, with these times."""
    fj = {} if fj_ms is None else {"ms": fj_ms, "err": 0.0}
    if paged_ms is not None:
        fj.update(paged_ms=paged_ms, page_size=shape.page_size, paged_err=0.0)
    row = {"label": shape.label(), "source": shape.source, "seqlen_q": shape.seqlen_q,
           "causal": shape.causal, "cache_bytes": shape.cache_bytes(), "flashjit": fj,
           "torch": {name: ({"ms": ms} if ms is not None else {"refused": "no"})
                     for name, ms in torch_ms.items()}}
    decode.summarize(row)
    return row


class DecodeTargets(unittest.TestCase):
    def test_one_row_reading_256_mib_is_judged_on_speed_and_bandwidth(self):
        # 4 x 65536 keys x 1 KV head x d256, K and V in bf16: exactly 256 MiB.
        shape = decode.DecodeShape(4, 8, 1, 1, 65536, 256)
        self.assertEqual(shape.cache_bytes(), 256 * 2**20)
        row = made_up_row(shape, 0.080, {"cudnn": 0.100, "flash": 0.090, "efficient": None})
        kinds = {t["kind"]: t for t in row["targets"]}
        self.assertEqual(set(kinds), {"one row", "bandwidth"})
        self.assertAlmostEqual(kinds["one row"]["got"], 0.090 / 0.080)
        self.assertTrue(kinds["one row"]["met"])
        self.assertAlmostEqual(kinds["bandwidth"]["got"], 2**28 / 1e9 / 0.080)  # 3.36 TB/s
        self.assertFalse(kinds["bandwidth"]["met"])

    def test_a_small_cache_is_judged_on_speed_alone(self):
        row = made_up_row(decode.DecodeShape(1, 32, 8, 1, 4096, 128), 0.018,
                          {"cudnn": 0.017, "flash": 0.024, "efficient": None})
        self.assertEqual([(t["kind"], t["met"]) for t in row["targets"]], [("one row", False)])

    def test_paged_pages_of_one_row_have_their_own_bound(self):
        shape = decode.DecodeShape(1, 32, 8, 1, 131072, 128, page_size=1)
        row = made_up_row(shape, 0.144, {"cudnn": 0.140}, paged_ms=0.230)  # 0.63 of dense
        paged = [t for t in row["targets"] if t["kind"] == "paged"]
        self.assertEqual(len(paged), 1)
        self.assertTrue(paged[0]["met"])
        shape16 = decode.DecodeShape(1, 32, 8, 1, 32768, 128, page_size=16)
        row16 = made_up_row(shape16, 0.051, {"cudnn": 0.050}, paged_ms=0.060)  # 0.85
        self.assertFalse([t for t in row16["targets"] if t["kind"] == "paged"][0]["met"])
        # Pages of 2 to 15 rows: the issue sets no bound.
        shape8 = decode.DecodeShape(1, 32, 8, 1, 32768, 128, page_size=8)
        row8 = made_up_row(shape8, 0.051, {"cudnn": 0.050}, paged_ms=0.060)
        self.assertEqual([t["kind"] for t in row8["targets"]], ["one row"])

    def test_short_causal_prefills_count_and_longer_or_full_ones_do_not(self):
        prefill = made_up_row(decode.DecodeShape(8, 32, 8, 16, 8192, 128, causal=True), 0.149,
                              {"cudnn": 0.363})
        self.assertEqual([(t["kind"], t["met"]) for t in prefill["targets"]],
                         [("prefill", True)])
        full = made_up_row(decode.DecodeShape(8, 32, 8, 16, 8192, 128), 0.149, {"cudnn": 0.363})
        self.assertEqual(full["targets"], [])
        # 2 new rows: neither one row nor a short prefill.
        two = made_up_row(decode.DecodeShape(8, 32, 8, 2, 8192, 128, causal=True), 0.149,
                          {"cudnn": 0.363})
        self.assertEqual(two["targets"], [])

    def test_no_time_is_a_miss_said_as_such(self):
        row = made_up_row(decode.DecodeShape(1, 32, 8, 1, 4096, 128), None,
                          {"cudnn": None, "flash": None})
        self.assertEqual(row["targets"][0]["got"], None)
        self.assertFalse(row["targets"][0]["met"])
        section = decode._targets_section([row])
        self.assertIn("- missed: b1 h32/8 1x4096 d128: >= 1.0x the fastest backend, got no time",
                      section)

    def test_the_section_counts_each_kind_and_lists_every_miss(self):
        rows = [made_up_row(decode.DecodeShape(4, 8, 1, 1, 65536, 256), 0.093,
                            {"cudnn": 0.102, "flash": 0.096}),
                made_up_row(decode.DecodeShape(1, 32, 4, 1, 4096, 256), 0.022,
                            {"cudnn": 0.019})]
        section = decode._targets_section(rows)
        self.assertIn("one query row >= 1.0x the fastest backend: 1 of 2", section[1])
        self.assertIn("one row reading >= 256 MiB at >= 3.4 TB/s: 0 of 1", section[1])
        self.assertNotIn("paged", section[1])
        self.assertEqual(section[2:], [
            "- missed: b4 h8/1 1x65536 d256: >= 3.4 TB/s, got 2.89 TB/s",
            "- missed: b1 h32/4 1x4096 d256: >= 1.0x the fastest backend, got 0.864x"])
        self.assertEqual(decode._targets_section([]), [])


class FakeTensor:
    def __init__(self, shape):
        self.shape = shape


def fake_torch():
    """The few torch calls prepare_kernels makes, on the CPU."""
    cuda = types.SimpleNamespace(
        current_stream=lambda: types.SimpleNamespace(cuda_stream=7),
        synchronize=lambda: None, empty_cache=lambda: None,
        OutOfMemoryError=type("OutOfMemoryError", (RuntimeError,), {}))
    return types.SimpleNamespace(
        bfloat16="bf16", float16="fp16", cuda=cuda,
        Generator=lambda device: types.SimpleNamespace(manual_seed=lambda seed: None),
        empty=lambda *shape, dtype, device: FakeTensor(shape),
        empty_like=lambda t: FakeTensor(t.shape))


class FakeKernel:
    def __init__(self, calls: list, spec: str):
        self.calls, self.spec = calls, spec

    def kv_cache_launcher(self, q, k, v, o, lse, scale, stream, seqlen_k, block_table=None,
                          page_size=0, workspace_factory=None):
        call = (self.spec.split()[1], k.shape, page_size)
        return lambda: self.calls.append(call)


class PrepareKernels(unittest.TestCase):
    def test_every_shape_is_called_once_dense_and_once_paged(self):
        fj = types.SimpleNamespace(FlashjitError=type("FlashjitError", (Exception,), {}))
        calls = []

        def kernel(spec):
            if "d512" in spec:
                raise fj.FlashjitError("no d512 here\nsecond line")
            return FakeKernel(calls, spec)

        shapes = [decode.DecodeShape(1, 32, 8, 1, 4096, 128, page_size=16),
                  decode.DecodeShape(2, 32, 4, 1, 1000, 64),
                  decode.DecodeShape(1, 8, 1, 1, 64, 512)]
        paged = lambda torch, k, v, page_size, gen: (k, v, "table")  # noqa: E731
        log = io.StringIO()
        with mock.patch.object(decode, "_paged", paged), redirect_stderr(log):
            kernels = {}
            decode.prepare_kernels(fake_torch(), fj, kernels,
                                   types.SimpleNamespace(kernel=kernel), shapes, "bf16")
        self.assertEqual(calls, [("dec_d128_bf16", (1, 4096, 8, 128), 0),
                                 ("dec_d128_bf16", (1, 4096, 8, 128), 16),
                                 ("dec_d64_bf16", (2, 1000, 4, 64), 0)])
        self.assertEqual(set(kernels), {(128, False), (64, False)})
        lines = log.getvalue().splitlines()
        self.assertEqual(len(lines), 3)
        self.assertTrue(lines[0].startswith("[compile 1/3] b1 h32/8 1x4096 d128: "))
        self.assertEqual(lines[2], "[compile 3/3] b1 h8/1 1x64 d512: no d512 here")


if __name__ == "__main__":
    unittest.main()
