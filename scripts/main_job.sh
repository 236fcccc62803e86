#!/usr/bin/env bash
# The main job: builds flashjit (scripts/setup.sh), then for every spec in configs/:
#   1. flashjit check    — the spec parses and validates
#   2. flashjit gen      — the generated CUDA source, written to build/generated/<name>.cu
#   3. flashjit compile  — NVRTC for sm_80 and sm_90a: a table of registers, shared memory,
#                          spill bytes and compile time (no GPU needed)
#   4. flashjit run      — with a GPU only: each spec on one moderate shape, checked against
#                          the fp64 CPU reference, with its TFLOP/s
# Exits non-zero if any check, gen, compile or run failed. Without a GPU, step 4 is not a
# failure: the last line says what could not run and why.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"${repo_root}/scripts/setup.sh"

cli="${repo_root}/build/flashjit"
generated_dir="${repo_root}/build/generated"
compile_targets=(sm_80 sm_90a)
# One moderate shape, not a multiple of any tile; a second run of the first spec checks GQA.
run_shape=(--batch 2 --heads 8 --heads-kv 8 --seqlen-q 1000 --seqlen-k 1037)
gqa_shape=(--batch 2 --heads 8 --heads-kv 2 --seqlen-q 1000 --seqlen-k 1037)

failures=0
failed_steps=()
record_failure() { failures=$((failures + 1)); failed_steps+=("$1"); }

# Value of a scalar field in one object of the CLI's --json output ("" when absent); a
# string loses its quotes (escapes are left as written). The field names are stable.
json_field() {
  local json="$1" field="$2" value
  value="$(grep -oE "\"${field}\":(\"([^\"\\\\]|\\\\.)*\"|[^,}]*)" <<<"$json" | head -n1)"
  value="${value#*:}"
  value="${value#\"}"
  printf '%s' "${value%\"}"
}

shopt -s nullglob
configs=("${repo_root}"/configs/*.yaml)
if [[ ${#configs[@]} -eq 0 ]]; then
  echo "[main] ERROR: no specs in configs/*.yaml" >&2
  exit 1
fi
mkdir -p "$generated_dir"
stderr_file="$(mktemp)"
trap 'rm -f "$stderr_file"' EXIT
spec_name() { basename "$1" .yaml; }

echo
echo "== 1. check (${#configs[@]} specs)"
for config in "${configs[@]}"; do
  name="$(spec_name "$config")"
  if output="$("$cli" check "$config" 2>&1)"; then
    echo "  ok      $name"
  else
    echo "  FAILED  $name"
    sed 's/^/          /' <<<"$output"
    record_failure "check $name"
  fi
done

echo
echo "== 2. gen -> build/generated/"
for config in "${configs[@]}"; do
  name="$(spec_name "$config")"
  # No --arch: the spec's arch, or for arch: auto this machine's GPU (sm_80 without one).
  if output="$("$cli" gen "$config" -o "${generated_dir}/${name}.cu" 2>&1)"; then
    target="$(sed -n 's|^// flashjit: target \([a-z0-9_]*\).*|\1|p' <<<"$output")"
    echo "  ok      $name  (${target:-?}, $(wc -l <"${generated_dir}/${name}.cu") lines)"
  else
    echo "  FAILED  $name"
    sed 's/^/          /' <<<"$output"
    record_failure "gen $name"
  fi
done

echo
echo "== 3. compile (NVRTC; exit 1 from flashjit compile means the kernel spills)"
printf '  %-28s %-7s %-12s %5s %8s %12s %10s %-5s\n' \
  spec target tiles regs smem_B "spill st/ld" compile_ms cache
for target in "${compile_targets[@]}"; do
  for config in "${configs[@]}"; do
    name="$(spec_name "$config")"
    rc=0
    json="$("$cli" compile "$config" --arch "$target" --json 2>"$stderr_file")" || rc=$?
    if [[ -n "$json" ]]; then
      cache="miss"
      [[ "$(json_field "$json" cache_hit)" == "true" ]] && cache="hit"
      printf '  %-28s %-7s %-12s %5s %8s %12s %10.1f %-5s\n' "$name" "$target" \
        "m$(json_field "$json" block_m)n$(json_field "$json" block_n)w$(json_field "$json" warps)s$(json_field "$json" stages)" \
        "$(json_field "$json" registers)" "$(json_field "$json" shared_bytes)" \
        "$(json_field "$json" spill_store_bytes)/$(json_field "$json" spill_load_bytes)" \
        "$(json_field "$json" compile_ms)" "$cache"
    fi
    if [[ $rc -ne 0 ]]; then
      printf '  %-28s %-7s FAILED (exit %d)\n' "$name" "$target" "$rc"
      sed 's/^/          /' "$stderr_file"
      record_failure "compile $name $target"
    fi
  done
done

echo
echo "== 4. run on the GPU (${run_shape[*]})"
gpu_note=""
if ! nvidia-smi >/dev/null 2>&1; then
  gpu_note="no GPU on this machine (nvidia-smi does not work): flashjit run was not run for any spec"
  echo "  skipped: $gpu_note"
else
  run_one() {  # name, config, label, shape...; returns 3 when flashjit finds no GPU
    local name="$1" config="$2" label="$3"
    shift 3
    local json rc=0
    json="$("$cli" run "$config" "$@" --json 2>"$stderr_file")" || rc=$?
    [[ $rc -eq 3 ]] && return 3
    if [[ $rc -eq 0 && "$(json_field "$json" passed)" == "true" ]]; then
      printf '  %-6s %-28s %-4s %7.1f TFLOP/s   O max abs err %s\n' pass "$name" "$label" \
        "$(json_field "$json" tflops)" "$(json_field "$json" o_max_abs)"
    else
      printf '  %-6s %-28s %-4s exit %d: %s\n' FAILED "$name" "$label" "$rc" \
        "$(json_field "$json" failure)"
      sed 's/^/          /' "$stderr_file"
      record_failure "run $name $label"
    fi
  }
  for config in "${configs[@]}"; do
    name="$(spec_name "$config")"
    rc=0
    run_one "$name" "$config" mha "${run_shape[@]}" || rc=$?
    if [[ $rc -eq 3 ]]; then
      gpu_note="nvidia-smi works but flashjit found no usable GPU (flashjit run exit 3): flashjit run was not run"
      echo "  skipped: $gpu_note"
      break
    fi
  done
  if [[ -z "$gpu_note" ]]; then
    run_one "$(spec_name "${configs[0]}")" "${configs[0]}" gqa "${gqa_shape[@]}" || true
  fi
fi

echo
echo "== 5. benchmark against PyTorch (bench/compare.py; results in bench/results/)"
if [[ -n "$gpu_note" ]]; then
  echo "  skipped: no GPU"
elif ! python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
  gpu_note="PyTorch with CUDA is not importable here: the benchmark against it was not run"
  echo "  skipped: $gpu_note"
elif ! "${repo_root}/scripts/bench.sh"; then
  record_failure "benchmark"
fi

echo
if [[ $failures -eq 0 ]]; then
  echo "[main] all steps passed (${#configs[@]} specs; compiled for ${compile_targets[*]})"
else
  echo "[main] ${failures} step(s) FAILED: ${failed_steps[*]}"
fi
if [[ -n "$gpu_note" ]]; then
  echo "[main] not run: ${gpu_note}"
fi
[[ $failures -eq 0 ]]
