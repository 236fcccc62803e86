#!/usr/bin/env bash
# The GPU machine's check (DESIGN.md): build flashjit (Release), run the CPU and codegen suites
# through ctest, run the GPU suite, compile every config for sm_90a, and write every log to
# OUTDIR. Each step runs even if an earlier one failed, so all logs exist; the script exits
# non-zero if anything failed and ends with a one-line summary.
#
#   scripts/gpu_check.sh OUTDIR
#
# OUTDIR/build.log      configure + build
# OUTDIR/ctest.log      ctest --output-on-failure, every suite but gpu
# OUTDIR/gpu_tests.log  the GPU suite (one line per case: spec, shape, errors)
# OUTDIR/torch_backward.log  dQ, dK, dV against PyTorch autograd (tests/gpu/torch_backward_check.py)
# OUTDIR/compile.jsonl  `flashjit compile --json --arch sm_90a configs/*.yaml`
# OUTDIR/dump/          rendered source, PTX and ptxas report of one kernel
# OUTDIR/summary.txt    the summary line
set -u -o pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpu
mkdir -p "$1"
out=$(cd "$1" && pwd)
# Kernels are cached by a hash of their source and compiler, so reusing the folder across
# runs is safe; a fresh one only costs compile time.
export FLASHJIT_CACHE_DIR=${FLASHJIT_CACHE_DIR:-$build/kernel-cache}

failed=()
# step NAME LOG COMMAND...: runs the command with its output appended to LOG (and shown),
# records NAME as failed on a non-zero exit, and carries on.
step() {
  local name=$1 log=$2
  shift 2
  echo "== $name: $*" | tee -a "$log"
  "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 ]]; then
    echo "== $name FAILED (exit $rc)" | tee -a "$log"
    failed+=("$name")
  fi
}

# The GPU suite runs outside ctest so its full table lands in its own log, and because here a
# skip (exit 77: no GPU) is a failure, not the quiet "skipped" ctest would report.
gpu_suite() {
  "$build/tests/flashjit_gpu_tests"
  local rc=$?
  if [[ $rc -eq 77 ]]; then echo "the GPU machine has no usable GPU: the gpu suite did not run"; fi
  return $rc
}

compile_configs() {
  "$build/flashjit" compile --json --arch sm_90a "$root"/configs/*.yaml >"$out/compile.jsonl"
}

for log in build ctest gpu_tests torch_backward compile dump; do : >"$out/$log.log"; done
step configure "$out/build.log" cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
step build "$out/build.log" cmake --build "$build" -j16
if [[ ${#failed[@]} -eq 0 ]]; then
  step ctest "$out/ctest.log" ctest --test-dir "$build" --output-on-failure -LE gpu
  step gpu_tests "$out/gpu_tests.log" gpu_suite
  step torch_backward "$out/torch_backward.log" \
    python3 "$root/tests/gpu/torch_backward_check.py" "$build/flashjit"
  step compile "$out/compile.log" compile_configs
  step dump "$out/dump.log" env FLASHJIT_DUMP_DIR="$out/dump" \
    "$build/flashjit" compile --arch sm_90a "$root/configs/hd128.yaml"
fi

# ---- summary
gpu=$(grep -m1 '^GPU: ' "$out/gpu_tests.log" | sed 's/^GPU: //')
[[ -n $gpu ]] || gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
ctest_line=$(grep -m1 'tests passed' "$out/ctest.log")
gpu_cases=$(awk '/^-- [0-9]+ of [0-9]+ cases passed/ { p += $2; n += $4 }
                 END { if (n) printf "%d/%d cases passed", p, n; else print "no cases ran" }' \
            "$out/gpu_tests.log")
kernels=0
spilling=0
if [[ -s $out/compile.jsonl ]]; then
  kernels=$(wc -l <"$out/compile.jsonl")
  spilling=$(grep -cE '"spill_(store|load)_bytes":[1-9]' "$out/compile.jsonl")
fi
status=PASS
[[ ${#failed[@]} -eq 0 ]] || status="FAIL (${failed[*]})"
summary="gpu_check $(git -C "$root" rev-parse --short HEAD 2>/dev/null): GPU ${gpu:-unknown} | \
ctest (cpu+codegen): ${ctest_line:-did not run} | gpu: $gpu_cases | \
compile sm_90a: $kernels kernels, $spilling spilling | $status"
echo "$summary" | tee "$out/summary.txt"
[[ ${#failed[@]} -eq 0 ]]
