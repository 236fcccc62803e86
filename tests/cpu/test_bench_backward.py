#!/usr/bin/env python3
"""CPU tests of the benchmark's backward rows (bench/backward.py, shapes.py, results.py,
grad_check.py, flashjit_lib.py, compare.py --list): the rows, FLOPs and targets, the
verdicts and the table of rows made up here, and the ctypes binding of flashjit_backward against the built library
(no GPU: a null kernel is refused). Needs no torch.

    test_bench_backward.py LIBFLASHJIT_C [unittest arguments]"""
from __future__ import annotations

import contextlib
import ctypes
import io
import sys
import unittest
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import backward  # noqa: E402
import compare  # noqa: E402
import flashjit_lib  # noqa: E402
import grad_check  # noqa: E402
import results  # noqa: E402
import shapes  # noqa: E402

LIBRARY = None  # set from argv


class BackwardGrid(unittest.TestCase):
    def test_the_issue_rows_then_the_long_series(self):
        rows = shapes.backward_grid(None, None, False)
        self.assertEqual(len(rows), 11 * 2 + 3)
        dims = {(r.dqk, r.dv) for r in rows if r.seqlen == 16384}
        self.assertEqual(dims, {(64, 64), (128, 128), (192, 192), (256, 256), (192, 128),
                                (72, 72), (100, 100), (136, 136), (200, 200), (320, 320),
                                (512, 512)})
        self.assertTrue(all(r.dtype == "bf16" for r in rows))
        by_label = {r.label() for r in rows}
        # ANCHORS.md's shapes: 16k tokens, heads = 2048 / d (16 for 192/128).
        for label in ("bf16 d72 s16384 full 1x28", "bf16 d136 s16384 causal 1x15",
                      "bf16 d192/128 s16384 full 1x16", "bf16 d512 s16384 full 1x4",
                      "bf16 d64 s23400 causal 1x12", "bf16 d64 s23400 causal 4x12",
                      "bf16 d40 s23400 causal 2x12"):
            self.assertIn(label, by_label)

    def test_chosen_dims_leave_the_long_series_out(self):
        rows = shapes.backward_grid([(64, 64)], None, False)
        self.assertEqual([r.label() for r in rows],
                         ["bf16 d64 s16384 full 1x32", "bf16 d64 s16384 causal 1x32"])
        self.assertTrue(all(r.seqlen == 4096 for r in shapes.backward_grid(None, None, True)))

    def test_backward_flops_are_two_and_a_half_forwards(self):
        full = shapes.Shape("bf16", 64, 64, 16384, False)
        self.assertEqual(shapes.backward_flops(full), 5 * 2 * 32 * 16384 ** 2 * 128 // 2)
        # Causal counts the visible pairs exactly: s (s + 1) / 2 per head.
        long = shapes.Shape("bf16", 64, 64, 23400, True, 4, 12)
        pairs = 23400 * 23401 // 2
        self.assertEqual(shapes.backward_flops(long), 5 * 2 * 4 * 12 * pairs * 128 // 2)

    def test_targets(self):
        def described(dqk, dv, seqlen=16384, causal=False, batch=0, heads=0):
            shape = shapes.Shape("bf16", dqk, dv, seqlen, causal, batch, heads)
            return [t.describe() for t in shapes.backward_targets_for(shape)]

        self.assertEqual(described(64, 64), [">= 1.17x cuDNN"])
        self.assertEqual(described(192, 128), [">= 1.66x cuDNN"])
        self.assertEqual(described(136, 136), [">= 1.5x best PyTorch", ">= 1.98x cuDNN"])
        self.assertEqual(described(512, 512), [">= 200 TFLOP/s"])
        self.assertEqual(described(64, 64, causal=True), [])
        self.assertEqual(described(64, 64, seqlen=4096), [])
        self.assertEqual(described(64, 64, 23400, True, 1, 12), [">= 1.27x cuDNN"])
        self.assertEqual(described(40, 40, 23400, True, 2, 12), [])


class ListFlag(unittest.TestCase):
    def test_list_prints_the_backward_rows_without_torch(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(compare.main(["--backward", "--list"]), 0)
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[-1], "25 shapes")
        self.assertEqual(lines[0], "bf16 d64 s16384 full 1x32: 5.498 TFLOP; target >= 1.17x cuDNN")

    def test_masks_and_backward_are_separate_runs(self):
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            compare.parse_args(["--masks", "--backward"])


def made_up_row(shape, flashjit: dict, cudnn_tflops=300.0, flash="refused"):
    row = backward.new_row(shape)
    row["flashjit"] = flashjit
    row["torch"] = {"cudnn": {"ms": 1.0, "tflops": cudnn_tflops,
                              "err": {"dq": 1e-3, "dk": 1e-3, "dv": 1e-3}},
                    "flash": {"refused": "Flash attention does not support this"},
                    "efficient": {"ms": 4.0, "tflops": 100.0,
                                  "err": {"dq": 5e-4, "dk": 5e-4, "dv": 5e-4}}}
    if flash != "refused":
        row["torch"]["flash"] = {"ms": 2.0, "tflops": flash}
    row["reference_max"] = {"dq": 1.0, "dk": 1.0, "dv": 1.0}
    return row


class Verdicts(unittest.TestCase):
    def test_ratios_and_targets(self):
        shape = shapes.Shape("bf16", 136, 136, 16384, False)
        row = made_up_row(shape, {"ms": 1.0, "tflops": 500.0,
                                  "err": {"dq": 1e-3, "dk": 1e-3, "dv": 1e-3}},
                          cudnn_tflops=200.0, flash=300.0)
        backward.summarize(row, shape)
        self.assertEqual(row["best_torch"], "flash")
        self.assertAlmostEqual(row["ratio_best"], 500 / 300)
        self.assertAlmostEqual(row["ratio_cudnn"], 2.5)
        self.assertEqual([t["met"] for t in row["targets"]], [True, True])
        self.assertTrue(row["check_ok"])

    def test_an_absolute_target_and_a_missing_time(self):
        shape = shapes.Shape("bf16", 512, 512, 16384, False)
        row = made_up_row(shape, {"ms": 1.0, "tflops": 150.0,
                                  "err": {"dq": 0.0, "dk": 0.0, "dv": 0.0}})
        backward.summarize(row, shape)
        self.assertEqual(row["targets"], [{"describe": ">= 200 TFLOP/s", "got": 150.0,
                                           "met": False}])
        failed = made_up_row(shape, {"error": "flashjit usage error: no kernel path"})
        backward.summarize(failed, shape)
        self.assertFalse(failed["targets"][0]["met"])
        self.assertIsNone(failed["ratio_best"])
        self.assertNotIn("check_ok", failed)  # nothing of flashjit's to check

    def test_gradient_errors_against_the_best_backend_and_the_floor(self):
        shape = shapes.Shape("bf16", 64, 64, 16384, True)

        def check_ok(dk_error):
            row = made_up_row(shape, {"ms": 1.0, "tflops": 400.0,
                                      "err": {"dq": 0.0, "dk": dk_error, "dv": 0.0}})
            row["reference_max"] = {"dq": 0.1, "dk": 0.1, "dv": 0.1}
            backward.summarize(row, shape)
            return row["check_ok"]

        # 4 x the most accurate backend's 5e-4 = 2e-3 (above the floor 0.1 / 256).
        self.assertTrue(check_ok(2e-3))
        self.assertFalse(check_ok(2.1e-3))
        self.assertFalse(check_ok(float("inf")))  # an unwritten (NaN) element


class Table(unittest.TestCase):
    def test_failed_rows_refusals_and_the_spot_check_show(self):
        ok_shape = shapes.Shape("bf16", 64, 64, 16384, False)
        ok = made_up_row(ok_shape, {"forward_tflops": 450.0, "ms": 2.5, "tflops": 2199.0,
                                    "err": {"dq": 1e-3, "dk": 2e-3, "dv": 3e-3}})
        backward.summarize(ok, ok_shape)
        bad_shape = shapes.Shape("bf16", 100, 100, 16384, False)
        bad = made_up_row(bad_shape, {"forward_tflops": 226.0,
                                      "error": "flashjit usage error: no kernel path"})
        backward.summarize(bad, bad_shape)
        env = {k: "x" for k in ("gpu", "date", "commit", "flashjit", "driver", "torch",
                                "torch_cuda", "cudnn", "triton", "timing")}
        spot = [{"label": "bf16 d64 b2 h4/4 s128x128 full", "status": "not served",
                 "message": "flashjit usage error: no kernel path serves the backward"}]
        text = results.backward_markdown(env, [ok, bad], spot, 1.0)
        self.assertIn("- NOT SERVED bf16 d64 b2 h4/4 s128x128 full: flashjit usage error", text)
        self.assertIn("| 64 | 16384 | no | 1×32 | 450 | 2.500 | 2199 | 300 | — | 100 | 7.33× "
                      "| 7.33× | 1.0e-03 / 2.0e-03 / 3.0e-03 (1.0e-03 / 1.0e-03 / 1.0e-03) |",
                      text)
        self.assertIn("| 100 | 16384 | no | 1×20 | 226 | error | — |", text)
        self.assertIn("1 of 2 met", text)
        self.assertIn("- missed: bf16 d100 s16384 full 1x20: >= 1.5x best PyTorch, got no "
                      "flashjit backward time", text)
        self.assertIn("- flashjit's backward failed on bf16 d100 s16384 full 1x20: flashjit "
                      "usage error: no kernel path", text)
        self.assertIn("- flash's backward refused 2 shape(s)", text)


class GradCheckStatus(unittest.TestCase):
    def test_exit_status(self):
        def status(*kinds):
            return grad_check.exit_status([{"status": k} for k in kinds])

        self.assertEqual(status("pass", "pass"), 0)
        self.assertEqual(status("pass", "not served"), grad_check.NOT_SERVED_EXIT)
        self.assertEqual(status("not served", "fail"), 1)
        self.assertEqual(status("pass", "error"), 1)


class FakeTensor:
    """What the binding reads of a torch tensor: shape, strides, address."""

    def __init__(self, shape, address):
        self.shape = shape
        strides, step = [], 1
        for extent in reversed(shape):
            strides.insert(0, step)
            step *= extent
        self._strides, self._address = tuple(strides), address

    def stride(self, dim=None):
        return self._strides if dim is None else self._strides[dim]

    def data_ptr(self):
        return self._address


class Binding(unittest.TestCase):
    def test_a_null_kernel_is_a_usage_error_through_ctypes(self):
        lib = flashjit_lib.Library(LIBRARY)
        kernel = flashjit_lib.Kernel(lib, ctypes.c_void_p())
        q, k, v, o, d_o, d_q, d_k, d_v = (FakeTensor((1, 128, 2, 64), 0x1000 * (i + 1))
                                          for i in range(8))
        lse = FakeTensor((1, 2, 128), 0x9000)
        tensors = (q, k, v, o, lse, d_o, d_q, d_k, d_v)
        with self.assertRaises(flashjit_lib.FlashjitError) as caught:
            kernel.backward_workspace_bytes(*tensors, 0.0)
        self.assertEqual(caught.exception.kind, "usage")
        self.assertIn("flashjit_backward_workspace_bytes: kernel is null", str(caught.exception))
        launch = kernel.backward_launcher(*tensors, 0.0, 0)
        with self.assertRaises(flashjit_lib.FlashjitError) as caught:
            launch()
        self.assertIn("flashjit_backward: kernel is null", str(caught.exception))

    def test_the_launcher_holds_its_workspace(self):
        # Freed before the launch, a workspace's memory could go to another tensor in
        # between, and the deterministic kernel's counters with it (bench/NOTES.md entry 34).
        class Buffer:
            def data_ptr(self):
                return 0xa000

            def numel(self):
                return 4096

            def element_size(self):
                return 1

        lib = flashjit_lib.Library(LIBRARY)
        kernel = flashjit_lib.Kernel(lib, ctypes.c_void_p())
        tensors = [FakeTensor((1, 128, 2, 64), 0x1000 * (i + 1)) for i in range(9)]
        tensors[4] = FakeTensor((1, 2, 128), 0x9000)
        workspace = Buffer()
        alive = weakref.ref(workspace)
        launch = kernel.backward_launcher(*tensors, 0.0, 0, workspace)
        del workspace
        self.assertIsNotNone(alive())
        del launch
        self.assertIsNone(alive())

    def test_a_head_dim_stride_other_than_one_is_refused_before_the_call(self):
        lib = flashjit_lib.Library(LIBRARY)
        kernel = flashjit_lib.Kernel(lib, ctypes.c_void_p())
        tensors = [FakeTensor((1, 128, 2, 64), 0x1000) for _ in range(9)]
        tensors[6]._strides = (16384, 128, 64, 2)  # d_q
        with self.assertRaisesRegex(ValueError, "d_q: the head_dim stride must be 1"):
            kernel.backward_launcher(*tensors, 0.0, 0)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    LIBRARY = sys.argv.pop(1)
    unittest.main()
