#!/usr/bin/env bash
# Runs one FileCheck codegen test, lit style.
#   run_codegen_test.sh TEST CLI FILECHECK SRCDIR
# TEST holds `// RUN:` lines (a line ending in `\` continues on the next RUN line).
# Substitutions: %flashjit (CLI), %FileCheck (FILECHECK), %src (SRCDIR), %s (TEST),
# %t (one fresh temp dir for the whole test, shared by its RUN lines).
# Each RUN line runs under `bash -e -o pipefail`; the first failure fails the test.
# Exit 77 (ctest SKIP_RETURN_CODE) when FileCheck is not available.
set -uo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 TEST CLI FILECHECK SRCDIR" >&2
  exit 2
fi
test_file="$1" cli="$2" filecheck="$3" src_dir="$4"

# CMake passes FILECHECK-NOTFOUND when find_program found nothing.
if [[ -z "$filecheck" || ! -x "$filecheck" ]]; then
  echo "SKIPPED: FileCheck not found (install the Debian package llvm-19-tools)"
  exit 77
fi
if [[ ! -x "$cli" ]]; then
  echo "FAILED: flashjit CLI not found at '$cli'" >&2
  exit 1
fi

# Collect the RUN commands, joining continuation lines.
commands=()
pending=""
while IFS= read -r line; do
  [[ "$line" =~ ^[[:space:]]*//[[:space:]]*RUN:[[:space:]]?(.*)$ ]] || continue
  part="${BASH_REMATCH[1]}"
  if [[ "$part" =~ ^(.*)\\[[:space:]]*$ ]]; then
    pending+="${BASH_REMATCH[1]} "
    continue
  fi
  commands+=("${pending}${part}")
  pending=""
done <"$test_file"
if [[ -n "$pending" ]]; then
  echo "FAILED: $test_file ends inside a continued RUN line" >&2
  exit 1
fi
if [[ ${#commands[@]} -eq 0 ]]; then
  echo "FAILED: $test_file has no RUN lines" >&2
  exit 1
fi

tmp_dir="$(mktemp -d "${TMPDIR:-/tmp}/flashjit-codegen.XXXXXX")"

substitute() {
  local cmd="$1"
  # %src before %s: %s is a prefix of %src.
  cmd="${cmd//%flashjit/$cli}"
  cmd="${cmd//%FileCheck/$filecheck}"
  cmd="${cmd//%src/$src_dir}"
  cmd="${cmd//%s/$test_file}"
  cmd="${cmd//%t/$tmp_dir}"
  printf '%s' "$cmd"
}

index=0
for command in "${commands[@]}"; do
  index=$((index + 1))
  expanded="$(substitute "$command")"
  echo "RUN[$index]: $expanded"
  if ! bash -e -o pipefail -c "$expanded"; then
    echo "FAILED: RUN line $index of $test_file (temp dir kept: $tmp_dir)" >&2
    exit 1
  fi
done

rm -rf "$tmp_dir"
echo "PASSED: ${#commands[@]} RUN lines of $(basename "$test_file")"
