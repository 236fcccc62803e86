#!/usr/bin/env python3
"""The loops of a kernel's machine code, counted: for each cubin, the loop that holds the most
tensor-core instructions (a kernel's main loop), its instruction count and opcode mix, and
with --blocks its basic blocks, so the instructions one path through a step runs can be summed
(a branch's two sides both lie inside the loop). No GPU needed: it reads `nvdisasm -c`.

    FLASHJIT_DUMP_DIR=/tmp/d build/flashjit compile --decode --arch sm_90a configs/hd128.yaml
    scripts/sass_loops.py --blocks /tmp/d/fa_dec_qk128_v128_bf16_full_m16n64w4s3_a16_sm90a.cubin

nvdisasm is taken from $NVDISASM, else PATH. Without the CUDA toolkit, PyPI's works:
`pip download nvidia-cuda-nvdisasm --no-deps` and unzip the wheel (nvidia/cu13/bin/nvdisasm).
--sass FILE reads saved `nvdisasm -c` output instead of a cubin. Exit status: 0 counted;
1 a file with no loop; 2 bad arguments or no nvdisasm."""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

LABEL = re.compile(r"^\s*(\.L_x_\d+):")
INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;")
BRANCH_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
# Opcodes after which control does not fall through to the next instruction unconditionally.
BRANCHES = ("BRA", "EXIT", "RET", "BRX", "JMP", "JMX", "CALL")
# The tensor-core products that mark a kernel's main loop.
MMA = ("HMMA", "HGMMA", "IMMA", "IGMMA", "QGMMA", "DMMA")


@dataclass
class Block:
    label: str  # its label, or "+N" for a block that starts after a branch without one
    first: int  # index of its first instruction
    instructions: list[str] = field(default_factory=list)


def opcode(instruction: str) -> str:
    """The opcode without its predicate and modifiers: "@!P0 BRA `(.L_x_3)" -> "BRA"."""
    words = instruction.split()
    word = words[1] if words[0].startswith("@") else words[0]
    return word.split(".")[0]


def parse(sass: str) -> tuple[list[str], dict[str, int]]:
    """The instructions of every function in order, and each label's instruction index."""
    instructions: list[str] = []
    labels: dict[str, int] = {}
    for line in sass.splitlines():
        label = LABEL.match(line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        instruction = INSTRUCTION.match(line)
        if instruction:
            instructions.append(instruction.group(2))
    return instructions, labels


def loops(instructions: list[str], labels: dict[str, int]) -> list[tuple[int, int]]:
    """Every backward branch's (target, branch) instruction indices: a loop's body."""
    found = []
    for index, instruction in enumerate(instructions):
        if opcode(instruction) != "BRA":
            continue
        target = BRANCH_TARGET.search(instruction)
        if target and labels.get(target.group(1), index + 1) <= index:
            found.append((labels[target.group(1)], index))
    return found


def blocks(instructions: list[str], labels: dict[str, int], first: int, last: int) -> list[Block]:
    """The basic blocks of instructions[first..last]: split at labels and after branches."""
    starts = {index: name for name, index in labels.items()}
    result: list[Block] = []
    for index in range(first, last + 1):
        if not result or index in starts or opcode(instructions[index - 1]) in BRANCHES:
            result.append(Block(starts.get(index, f"+{index - first}"), index))
        result[-1].instructions.append(instructions[index])
    return result


def main_loop(instructions: list[str], labels: dict[str, int]) -> tuple[int, int] | None:
    """The loop with the most tensor-core instructions, the longer one on a tie."""
    def weight(span: tuple[int, int]) -> tuple[int, int]:
        body = instructions[span[0]:span[1] + 1]
        return sum(opcode(i) in MMA for i in body), len(body)
    spans = loops(instructions, labels)
    return max(spans, key=weight) if spans else None


def report(name: str, sass: str, show_blocks: bool, top: int) -> bool:
    instructions, labels = parse(sass)
    span = main_loop(instructions, labels)
    if span is None:
        print(f"{name}: no loop ({len(instructions)} instructions)")
        return False
    body = instructions[span[0]:span[1] + 1]
    mix = collections.Counter(opcode(i) for i in body)
    print(f"{name}: main loop of {len(body)} instructions "
          f"({sum(mix[m] for m in MMA)} tensor-core), kernel {len(instructions)}")
    print("  " + " ".join(f"{op} {count}" for op, count in mix.most_common(top)))
    if show_blocks:
        for block in blocks(instructions, labels, *span):
            last = block.instructions[-1]
            exit_note = ""
            if opcode(last) in BRANCHES:
                # "-> @!P0 .L_x_3": the branch's predicate, if any, and where it goes.
                target = BRANCH_TARGET.search(last)
                words = [last.split()[0]] if last.startswith("@") else []
                words.append(target.group(1) if target else opcode(last))
                exit_note = "  -> " + " ".join(words)
            block_mix = collections.Counter(opcode(i) for i in block.instructions)
            print(f"  {block.label:>10} {len(block.instructions):4d}  "
                  + " ".join(f"{op} {c}" for op, c in block_mix.most_common(5)) + exit_note)
    return True


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="cubins (or with --sass, nvdisasm output)")
    parser.add_argument("--sass", action="store_true", help="the files are `nvdisasm -c` output")
    parser.add_argument("--blocks", action="store_true", help="list the loop's basic blocks")
    parser.add_argument("--top", type=int, default=14, help="opcodes in the mix (default 14)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not args.sass and not nvdisasm:
        print("sass_loops: no nvdisasm (set NVDISASM or put it on PATH; see --help)", file=sys.stderr)
        return 2
    status = 0
    for path in args.files:
        if not path.is_file():
            print(f"sass_loops: {path}: no such file", file=sys.stderr)
            return 2
        if args.sass:
            sass = path.read_text()
        else:
            run = subprocess.run([nvdisasm, "-c", str(path)], capture_output=True, text=True)
            if run.returncode != 0:
                print(f"sass_loops: nvdisasm failed on {path}: {run.stderr.strip()}", file=sys.stderr)
                return 2
            sass = run.stdout
        if not report(path.name, sass, args.blocks, args.top):
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
