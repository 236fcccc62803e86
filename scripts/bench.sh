#!/usr/bin/env bash
# Runs the benchmark of bench/README.md on this machine's GPU in one go:
#   scripts/bench.sh [OUTDIR] [-- extra arguments of bench/compare.py]
# Builds flashjit and libflashjit_c.so (scripts/setup.sh, into build/), runs bench/compare.py
# on the whole grid, writes bench/results/<date>-<gpu>-<commit>.{md,json} and latest.{md,json},
# and, given OUTDIR, copies those results there with the build and benchmark logs.
# Examples: scripts/bench.sh /tmp/logs            scripts/bench.sh -- --quick
# Exits with compare.py's status: 0 all ran and passed the error check, 1 flashjit failed or
# exceeded the error bound on some shape, 2 setup problem, 3 no GPU.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
results_dir="${repo_root}/bench/results"
lib="${repo_root}/build/capi/libflashjit_c.so"

out_dir=""
if [[ $# -gt 0 && "$1" != "--" ]]; then
  out_dir="$1"
  shift
fi
if [[ $# -gt 0 && "$1" == "--" ]]; then
  shift
fi
extra_args=("$@")

say() { echo "[bench] $*" >&2; }

# Logs go to OUTDIR when one is given, and to the terminal either way.
log_to() {
  if [[ -n "${out_dir}" ]]; then tee "${out_dir}/$1"; else cat; fi
}
if [[ -n "${out_dir}" ]]; then
  mkdir -p "${out_dir}"
  out_dir="$(cd "${out_dir}" && pwd)"
fi

"${repo_root}/scripts/setup.sh" 2>&1 | log_to build.log
if [[ ! -f "${lib}" ]]; then
  say "ERROR: ${lib} was not built. The top-level CMakeLists.txt must hold add_subdirectory(capi)."
  exit 2
fi

# The GPU machine's copy of the tree may have no .git: then the commit is 'unknown'.
commit="unknown"
if git -C "${repo_root}" rev-parse --short HEAD >/dev/null 2>&1; then
  commit="$(git -C "${repo_root}" rev-parse --short HEAD)"
  if ! git -C "${repo_root}" diff --quiet HEAD -- 2>/dev/null; then
    commit="${commit}+dirty"  # results of uncommitted changes must not pass for the commit's
  fi
fi

mkdir -p "${results_dir}"
marker="$(mktemp)"
trap 'rm -f "${marker}"' EXIT

say "python3 bench/compare.py --lib ${lib} --commit ${commit} ${extra_args[*]:-}"
# stdout (the tables) and stderr (progress) are logged apart: fd 3 carries stdout past the
# stderr pipe. With pipefail the status is compare.py's (tee succeeds).
status=0
{
  python3 "${repo_root}/bench/compare.py" --lib "${lib}" --commit "${commit}" \
          --out "${results_dir}" "${extra_args[@]}" 2>&1 1>&3 3>&- | log_to bench.stderr.log >&2
} 3>&1 | log_to bench.stdout.md || status=$?

if [[ -n "${out_dir}" ]]; then
  find "${results_dir}" -maxdepth 1 -type f -newer "${marker}" -exec cp {} "${out_dir}/" \;
  say "results and logs copied to ${out_dir}"
fi
exit "${status}"
