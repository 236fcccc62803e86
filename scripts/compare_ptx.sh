#!/usr/bin/env bash
# Checks that a change to templates/ or the emitter leaves the machine code alone: compares
# two FLASHJIT_DUMP_DIR dumps kernel by kernel, the PTX without line info, debug strings and
# comments, and ptxas's register, stack and spill lines.
#   scripts/compare_ptx.sh OLD_DUMP NEW_DUMP
# Make each dump from its tree with
#   FLASHJIT_DISABLE_CACHE=1 FLASHJIT_DUMP_DIR=DIR build/flashjit compile configs/*.yaml --arch sm_80
# (and --arch sm_90a). Exits non-zero, naming the kernels, if any differs or is missing.
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 OLD_DUMP NEW_DUMP" >&2
  exit 2
fi
old="$1" new="$2"

# The generated source's path and the inlined functions' names reach the PTX only through
# .file, .loc and the .debug_str section (-lineinfo).
ptx_code() {
  sed '/^[[:space:]]*\.section[[:space:]]*\.debug_str/,$d' "$1" |
    grep -v -E '^[[:space:]]*\.(loc|file)[[:space:]]' | sed 's://.*$::' | grep -v '^[[:space:]]*$'
}
resources() { grep -E 'Used|spill|stack' "$1"; }

bad=0 count=0
for old_ptx in "$old"/*.ptx; do
  kernel="$(basename "$old_ptx" .ptx)"
  count=$((count + 1))
  if [[ ! -f "$new/$kernel.ptx" ]]; then
    echo "missing in $new: $kernel"; bad=1; continue
  fi
  if ! cmp -s <(ptx_code "$old_ptx") <(ptx_code "$new/$kernel.ptx"); then
    echo "PTX differs: $kernel"; bad=1
  fi
  if ! cmp -s <(resources "$old/$kernel.ptxas.txt") <(resources "$new/$kernel.ptxas.txt"); then
    echo "registers, stack or spills differ: $kernel"; bad=1
  fi
done
for new_ptx in "$new"/*.ptx; do
  [[ -f "$old/$(basename "$new_ptx")" ]] || { echo "new in $new: $(basename "$new_ptx" .ptx)"; bad=1; }
done
if [[ $count -eq 0 ]]; then
  echo "no .ptx in $old" >&2
  exit 2
fi
[[ $bad -eq 0 ]] && echo "$count kernels: the same PTX and ptxas resources"
exit $bad
