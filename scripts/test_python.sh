#!/usr/bin/env bash
# Builds the Python package (pyproject.toml: scikit-build-core + nanobind) into a virtual
# environment under build/ and runs its tests (tests/python) with pytest. scripts/test.sh runs
# it after ctest. The venv sees the system's packages, so that where PyPI's torch is installed
# (the GPU machine) the flashjit.torch and GPU tests run; elsewhere they are reported skipped.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${repo_root}/build/python-venv"
log="${repo_root}/build/python/pip-install.log"
python="${PYTHON:-python3}"
say() { echo "[python] $*"; }

if ! "${python}" -c 'import venv, ensurepip' 2>/dev/null; then
  "${repo_root}/scripts/setup.sh" --install-only python3-venv python3-dev
fi
if [[ ! -x "${venv}/bin/python" ]]; then
  say "creating ${venv}"
  "${python}" -m venv --system-site-packages "${venv}"
fi
# The build backend, nanobind and the test tools; a no-op once present.
if ! "${venv}/bin/python" -c 'import scikit_build_core, nanobind, pytest, numpy' 2>/dev/null; then
  say "installing scikit-build-core, nanobind, pytest, numpy"
  "${venv}/bin/pip" install -q "scikit-build-core>=0.10" "nanobind>=2.0" pytest numpy
fi

mkdir -p "$(dirname "${log}")"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
fi
say "building and installing the package (log: ${log})"
if ! "${venv}/bin/pip" install --no-build-isolation --no-deps -v "${repo_root}" >"${log}" 2>&1; then
  tail -n 60 "${log}" >&2
  say "ERROR: building the package failed (log above)" >&2
  exit 1
fi

if ! "${venv}/bin/python" -c 'import torch' 2>/dev/null; then
  say "torch is not installed: the flashjit.torch and GPU tests will be reported as skipped"
elif ! nvidia-smi >/dev/null 2>&1; then
  say "no GPU on this machine: tests/python/test_gpu_*.py will be reported as skipped"
fi
say "pytest tests/python"
cd "${repo_root}"
"${venv}/bin/python" -m pytest -rs -q tests/python
