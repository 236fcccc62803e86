#!/usr/bin/env python3
"""CPU tests of scripts/sass_loops.py (a kernel's main loop counted from `nvdisasm -c`): the
parser, the loops and basic blocks of a made-up listing in nvdisasm's format, and the command
line on it through --sass. Needs no nvdisasm or GPU.

    test_sass_loops.py [unittest arguments]"""
from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import sass_loops  # noqa: E402

# A prologue, a short copy loop without tensor-core work, then a main loop whose step either
# takes a branch around four instructions or runs them, and an exit.
LISTING = textwrap.dedent("""\
        .text.kernel:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   ISETP.GE.AND P0, PT, R2, R3, PT ;
.L_x_1:
        /*0020*/                   LDG.E R4, desc[UR4][R6.64] ;
        /*0030*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0040*/               @P0 BRA `(.L_x_1) ;
.L_x_2:
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0060*/                   LDSM.16.M88.4 R8, [R116+0x20] ;
        /*0070*/                   HMMA.16816.F32.BF16 R12, R8, R10, R12 ;
        /*0080*/              @!P1 BRA `(.L_x_3) ;
        /*0090*/                   FMUL R12, R12, R20 ;
        /*00a0*/                   FMUL R13, R13, R20 ;
        /*00b0*/                   FMUL R14, R14, R20 ;
        /*00c0*/                   FMUL R15, R15, R20 ;
.L_x_3:
        /*00d0*/                   HMMA.16816.F32.BF16 R16, R8, R10, R16 ;
        /*00e0*/                   VIADD R2, R2, 0x1 ;
        /*00f0*/               @P2 BRA `(.L_x_2) ;
        /*0100*/                   EXIT ;
""")


class Parsing(unittest.TestCase):
    def test_opcode_drops_predicate_and_modifiers(self):
        self.assertEqual(sass_loops.opcode("@!P0 BRA `(.L_x_3)"), "BRA")
        self.assertEqual(sass_loops.opcode("HMMA.16816.F32.BF16 R12, R8, R10, R12"), "HMMA")

    def test_instructions_and_labels(self):
        instructions, labels = sass_loops.parse(LISTING)
        self.assertEqual(len(instructions), 17)
        self.assertEqual(labels, {".L_x_1": 2, ".L_x_2": 5, ".L_x_3": 13})

    def test_loops_are_backward_branches(self):
        instructions, labels = sass_loops.parse(LISTING)
        # The forward branch to .L_x_3 is no loop.
        self.assertEqual(sass_loops.loops(instructions, labels), [(2, 4), (5, 15)])

    def test_main_loop_holds_the_tensor_core_work(self):
        instructions, labels = sass_loops.parse(LISTING)
        self.assertEqual(sass_loops.main_loop(instructions, labels), (5, 15))

    def test_blocks_split_at_labels_and_after_branches(self):
        instructions, labels = sass_loops.parse(LISTING)
        found = sass_loops.blocks(instructions, labels, 5, 15)
        self.assertEqual([(b.label, len(b.instructions)) for b in found],
                         [(".L_x_2", 4), ("+4", 4), (".L_x_3", 3)])

    def test_no_loop(self):
        instructions, labels = sass_loops.parse("        /*0000*/                   EXIT ;\n")
        self.assertIsNone(sass_loops.main_loop(instructions, labels))


class CommandLine(unittest.TestCase):
    def run_main(self, argv: list[str]) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = sass_loops.main(argv)
        return status, out.getvalue(), err.getvalue()

    def test_report_of_a_listing(self):
        with tempfile.TemporaryDirectory() as folder:
            listing = Path(folder) / "kernel.sass"
            listing.write_text(LISTING)
            status, out, _ = self.run_main(["--sass", "--blocks", str(listing)])
        self.assertEqual(status, 0)
        lines = out.splitlines()
        self.assertEqual(lines[0], "kernel.sass: main loop of 11 instructions (2 tensor-core), "
                                   "kernel 17")
        self.assertEqual(lines[1], "  FMUL 4 HMMA 2 BRA 2 BAR 1 LDSM 1 VIADD 1")
        self.assertIn("-> @!P1 .L_x_3", lines[2])
        self.assertIn("-> @P2 .L_x_2", lines[4])

    def test_a_listing_without_loops_exits_1(self):
        with tempfile.TemporaryDirectory() as folder:
            listing = Path(folder) / "flat.sass"
            listing.write_text("        /*0000*/                   EXIT ;\n")
            status, out, _ = self.run_main(["--sass", str(listing)])
        self.assertEqual(status, 1)
        self.assertIn("no loop", out)

    def test_a_missing_file_exits_2(self):
        status, _, err = self.run_main(["--sass", "/nonexistent/kernel.sass"])
        self.assertEqual(status, 2)
        self.assertIn("no such file", err)


if __name__ == "__main__":
    unittest.main()
