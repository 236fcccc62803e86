#!/usr/bin/env bash
# Builds flashjit (scripts/setup.sh) and runs every test suite with ctest:
#   cpu     — spec, planning, generated source, NVRTC compiles, cache, CLI (no GPU needed)
#   codegen — FileCheck on the generated source, PTX and ptxas report (no GPU needed)
#   gpu     — numerical checks against an fp64 reference; without a GPU it exits 77 and
#             ctest reports it as "Skipped", which does not fail the run.
# then builds the Python package and runs its pytest suite (scripts/test_python.sh).
# Exits non-zero if the build or any test fails.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"${repo_root}/scripts/setup.sh"

if ! nvidia-smi >/dev/null 2>&1; then
  echo "[test] no GPU on this machine: the gpu suite will be reported as Skipped, not run;"
  echo "[test] run it on the GPU machine with scripts/gpu_check.sh OUTDIR"
fi

echo "[test] ctest --test-dir build"
ctest --test-dir "${repo_root}/build" --output-on-failure --parallel "$(nproc)"

"${repo_root}/scripts/test_python.sh"
