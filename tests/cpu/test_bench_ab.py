#!/usr/bin/env python3
"""CPU tests of bench/ab.py (builds timed against each other): its arguments, the summary
and table of rows made up here, and a whole run against a stand-in for compare.py that
records the order of its calls, the cache folder each got and the title of the ab.md it found.
Needs no torch or GPU.

    test_bench_ab.py [unittest arguments]"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import ab  # noqa: E402


def row(label: str, ms: float | None, cudnn: float | None = 1.0) -> dict:
    """A compare.py row: cuDNN the fastest backend, ratio_best as compare.py sets it."""
    torch = {"efficient": {"refused": "No available kernel."}}
    if cudnn is not None:
        torch["cudnn"] = {"ms": cudnn}
    ratio = cudnn / ms if cudnn is not None and ms else None
    return {"label": label, "flashjit": {"ms": ms} if ms is not None else {}, "torch": torch,
            "ratio_best": ratio}


class Arguments(unittest.TestCase):
    def parse_error(self, argv: list[str]) -> str:
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), self.assertRaises(SystemExit) as raised:
            ab.parse_args(argv)
        self.assertEqual(raised.exception.code, 2)
        return stderr.getvalue()

    def test_builds_in_order_and_the_compare_arguments_after_the_separator(self):
        args = ab.parse_args(["--lib", "main=/a.so", "--lib", "work=/b.so", "--out", "/tmp/x",
                              "--", "--decode", "--dims", "64"])
        self.assertEqual(args.builds, [("main", Path("/a.so")), ("work", Path("/b.so"))])
        self.assertEqual(args.compare_args, ["--decode", "--dims", "64"])
        self.assertEqual(args.rounds, 2)

    def test_one_build_a_bad_pair_or_a_repeated_name_is_refused(self):
        self.assertIn("at least two", self.parse_error(["--lib", "a=/a.so", "--out", "/x"]))
        self.assertIn("NAME=PATH", self.parse_error(["--lib", "a", "--lib", "b=/b", "--out", "/x"]))
        self.assertIn("differ", self.parse_error(["--lib", "a=/a", "--lib", "a=/b", "--out", "/x"]))
        self.assertIn("at least 1", self.parse_error(["--lib", "a=/a", "--lib", "b=/b",
                                                      "--out", "/x", "--rounds", "0"]))


class Summary(unittest.TestCase):
    def test_medians_ratios_and_rows_a_build_lacks(self):
        runs = {
            "main": [[row("r1", 2.0, cudnn=1.8), row("r2", 1.0)],
                     [row("r1", 2.2, cudnn=2.2), row("r2", 1.2)],
                     [row("r1", 2.1, cudnn=2.1), row("r2", 1.1)]],
            "work": [[row("r1", 1.0, cudnn=2.0), row("r2", None)],
                     [row("r1", 1.2, cudnn=2.4)],
                     [row("r1", 1.1, cudnn=2.2)]],
        }
        summary = ab.summarize(runs)
        self.assertEqual([e["label"] for e in summary], ["r1", "r2"])
        r1 = summary[0]["builds"]
        self.assertAlmostEqual(r1["main"]["ms"], 2.1)
        self.assertAlmostEqual(r1["work"]["ms"], 1.1)
        self.assertAlmostEqual(r1["work"]["vs_base"], 1.1 / 2.1)
        self.assertAlmostEqual(r1["main"]["vs_base"], 1.0)
        self.assertAlmostEqual(r1["main"]["ratio_best"], 1.0)
        self.assertAlmostEqual(r1["work"]["ratio_best"], 2.0)
        # r2 failed or is missing in every work run: only main has it.
        self.assertEqual(list(summary[1]["builds"]), ["main"])

    def test_a_row_without_a_ratio_to_pytorch_has_none(self):
        runs = {"main": [[row("r", 2.0, cudnn=None)]], "work": [[row("r", 1.0, cudnn=None)]]}
        builds = ab.summarize(runs)[0]["builds"]
        self.assertIsNone(builds["main"]["ratio_best"])
        self.assertAlmostEqual(builds["work"]["vs_base"], 0.5)

    def test_a_backward_rows_deterministic_time_is_an_entry_of_its_own(self):
        def backward_row(ms, det_ms):
            r = row("bf16 d100 s16384 full 1x20", ms)
            r["deterministic"] = {"ms": det_ms} if det_ms is not None else {"error": "x"}
            return r
        runs = {"main": [[backward_row(2.0, 2.5)], [backward_row(2.2, 2.7)]],
                "work": [[backward_row(2.0, 2.0)], [backward_row(2.2, None)]]}
        summary = ab.summarize(runs)
        self.assertEqual([e["label"] for e in summary],
                         ["bf16 d100 s16384 full 1x20", "bf16 d100 s16384 full 1x20 deterministic"])
        det = summary[1]["builds"]
        self.assertAlmostEqual(det["main"]["ms"], 2.6)
        self.assertAlmostEqual(det["work"]["ms"], 2.0)  # the run that has one
        self.assertAlmostEqual(det["work"]["vs_base"], 2.0 / 2.6)
        self.assertIsNone(det["main"]["ratio_best"])

    def test_the_table_has_a_column_a_build_and_a_closing_line_a_challenger(self):
        runs = {"main": [[row("r1", 2.0), row("r2", 1.0)]],
                "work": [[row("r1", 1.0), row("r2", 1.5)]]}
        text = ab.markdown(ab.summarize(runs), ["main", "work"], 1, ["--decode"])
        self.assertIn("| row | main ms | work ms | work x base | main vs best | work vs best |", text)
        self.assertIn("| r1 | 2.0000 | 1.0000 | 0.500 | 0.50 | 1.00 |", text)
        self.assertIn("- work / main time over 2 rows: median 1.000, best 0.500, worst 1.500", text)


FAKE_COMPARE = textwrap.dedent("""\
    import json, os, sys
    from pathlib import Path
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    ms = float(Path(args["--lib"]).read_text())
    table = Path(args["--out"]).parent / "ab.md"
    title = table.read_text().splitlines()[0] if table.exists() else "-"
    with open(os.environ["AB_CALLS"], "a") as calls:
        fields = [args["--commit"], os.environ["FLASHJIT_CACHE_DIR"], title.replace(" ", "_")]
        calls.write(" ".join(fields) + "\\n")
    if ms < 0:
        sys.exit(1)
    rows = [{"label": "r1", "flashjit": {"ms": ms}, "torch": {"cudnn": {"ms": 1.0}},
             "ratio_best": 1.0 / ms}]
    out = Path(args["--out"])
    (out / "2026-x-decode.json").write_text(json.dumps({"rows": rows}))
    (out / "latest-decode.json").write_text(json.dumps({"rows": []}))
""")


class WholeRun(unittest.TestCase):
    def run_ab(self, base_ms: str, work_ms: str) -> tuple[int, Path, list[str]]:
        tmp = Path(tempfile.mkdtemp())
        fake = tmp / "compare.py"
        fake.write_text(FAKE_COMPARE)
        (tmp / "base.so").write_text(base_ms)
        (tmp / "work.so").write_text(work_ms)
        calls = tmp / "calls.txt"
        argv = ["--lib", f"base={tmp / 'base.so'}", "--lib", f"work={tmp / 'work.so'}",
                "--out", str(tmp / "out"), "--", "--decode"]
        with mock.patch.object(ab, "COMPARE", fake), \
                mock.patch.dict("os.environ", {"AB_CALLS": str(calls)}), \
                contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            status = ab.main(argv)
        return status, tmp / "out", calls.read_text().splitlines()

    def test_builds_alternate_each_in_its_own_cache_and_the_table_is_written(self):
        status, out, calls = self.run_ab("2.0", "1.0")
        self.assertEqual(status, 0)
        self.assertEqual([c.split()[0] for c in calls], ["base", "work", "base", "work"])
        self.assertEqual({c.split()[1] for c in calls},
                         {str(out / "cache-base"), str(out / "cache-work")})
        self.assertIn("| r1 | 2.0000 | 1.0000 | 0.500 |", (out / "ab.md").read_text())

    def test_the_table_of_the_first_round_is_written_before_the_second(self):
        _, out, calls = self.run_ab("2.0", "1.0")
        tables = [c.split()[2] for c in calls]
        self.assertEqual(tables[:2], ["-", "-"])
        self.assertTrue(all("(1_rounds," in t for t in tables[2:]), tables)
        self.assertIn("(2 rounds,", (out / "ab.md").read_text())

    def test_a_failed_run_fails_the_whole_and_writes_no_table(self):
        status, out, _ = self.run_ab("2.0", "-1")
        self.assertEqual(status, 1)
        self.assertFalse((out / "ab.md").exists())

    def test_a_missing_library_is_refused_before_any_run(self):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            status = ab.main(["--lib", "a=/nonexistent/a.so", "--lib", "b=/nonexistent/b.so",
                              "--out", tempfile.mkdtemp()])
        self.assertEqual(status, 2)
        self.assertIn("no library", stderr.getvalue())


if __name__ == "__main__":
    unittest.main()
