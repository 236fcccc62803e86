#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with ASan and UBSan, into build-fuzz/) and runs each
# for SECONDS over its seeds (fuzz/seeds/<target>/) and the corpus it grew in earlier runs
# (build-fuzz/corpus/<target>/). A crash, hang (10 s on one input), leak, sanitizer report or
# out-of-memory (2 GiB) is written to build-fuzz/findings/<target>/ and fails the run.
#
#   scripts/fuzz.sh SECONDS [TARGET...]     targets: spec_yaml npy cache_entry bundle tune_db
#
# SECONDS 0 runs each target once over its seeds and corpus (a check that they build and run).
# Reproduce a finding with: build-fuzz/fuzz/fuzz_<target> build-fuzz/findings/<target>/crash-...
# Exits non-zero if the build or any target failed; the last lines are one summary per target.
set -euo pipefail

if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 SECONDS [TARGET...]" >&2
  exit 2
fi
seconds=$1
shift
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${repo_root}/build-fuzz"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(spec_yaml npy cache_entry bundle tune_db)

say() { echo "[fuzz] $*"; }

# clang and its libFuzzer runtime (not pulled in by clang without its recommends).
"${repo_root}/scripts/setup.sh" --install-only clang libclang-rt-dev

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
say "configuring into ${build_dir} (clang, FLASHJIT_FUZZ=ON)"
mkdir -p "${build_dir}"
cmake -S "${repo_root}" -B "${build_dir}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++ -DFLASHJIT_FUZZ=ON -DBUILD_TESTING=OFF \
      -DCUDAToolkit_ROOT="${cuda_home}" "${launcher[@]}" >"${build_dir}/configure.log" 2>&1 || {
  cat "${build_dir}/configure.log" >&2
  say "ERROR: cmake configure failed (log above)" >&2
  exit 1
}
say "building the fuzz targets with ${FUZZ_BUILD_JOBS:-$(nproc)} jobs"
cmake --build "${build_dir}" --target fuzz_targets -j"${FUZZ_BUILD_JOBS:-$(nproc)}"

summaries=()
failed=0
for target in "${targets[@]}"; do
  binary="${build_dir}/fuzz/fuzz_${target}"
  seeds="${repo_root}/fuzz/seeds/${target}"
  corpus="${build_dir}/corpus/${target}"
  findings="${build_dir}/findings/${target}"
  log="${build_dir}/fuzz_${target}.log"
  if [[ ! -x ${binary} || ! -d ${seeds} ]]; then
    say "ERROR: unknown target ${target} (no ${binary} or ${seeds})" >&2
    exit 2
  fi
  mkdir -p "${corpus}" "${findings}"
  say "${target}: ${seconds} s (log: ${log})"
  # New inputs go to the first folder (the corpus); the seeds are only read.
  length=(-max_total_time="${seconds}")
  [[ ${seconds} -gt 0 ]] || length=(-runs=0)
  rc=0
  "${binary}" "${length[@]}" -timeout=10 -rss_limit_mb=2048 \
              -artifact_prefix="${findings}/" -print_final_stats=1 \
              "${corpus}" "${seeds}" >"${log}" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "${log}" | tail -n1)
  if [[ ${rc} -eq 0 ]]; then
    summaries+=("${target}: ${runs:-?} inputs in ${seconds} s, no finding")
  else
    failed=1
    tail -n 60 "${log}" >&2
    summaries+=("${target}: FAILED (exit ${rc}) after ${runs:-?} inputs: see ${log} and ${findings}/")
  fi
done
for line in "${summaries[@]}"; do say "${line}"; done
exit "${failed}"
