#!/usr/bin/env bash
# Checks that a change to templates/ or the emitter leaves the machine code alone: compares
# two FLASHJIT_DUMP_DIR dumps kernel by kernel. With nvdisasm (on PATH, or $NVDISASM) it
# compares each cubin's SASS (`nvdisasm -c`, addresses stripped): the code that runs, so PTX
# that differs only in virtual register names or order passes when ptxas made the same
# instructions of it. Without nvdisasm it compares the PTX without line info, debug strings
# and comments. Either way it compares ptxas's register, stack and spill lines. A machine
# without the CUDA toolkit's nvdisasm can use PyPI's: `pip download nvidia-cuda-nvdisasm`
# and unzip the wheel (nvidia/cu13/bin/nvdisasm).
#   scripts/compare_ptx.sh OLD_DUMP NEW_DUMP
# Make each dump from its tree with
#   FLASHJIT_DISABLE_CACHE=1 FLASHJIT_DUMP_DIR=DIR build/flashjit compile configs/*.yaml --arch sm_80
# (and --arch sm_90a, --decode, --backward). Exits non-zero, naming the kernels, if any
# differs or is missing.
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 OLD_DUMP NEW_DUMP" >&2
  exit 2
fi
old="$1" new="$2"
nvdisasm="${NVDISASM:-$(command -v nvdisasm || true)}"

# The generated source's path and the inlined functions' names reach the PTX only through
# .file, .loc and the .debug_str section (-lineinfo).
ptx_code() {
  sed '/^[[:space:]]*\.section[[:space:]]*\.debug_str/,$d' "$1" |
    grep -v -E '^[[:space:]]*\.(loc|file)[[:space:]]' | sed 's://.*$::' | grep -v '^[[:space:]]*$'
}
sass_code() { "$nvdisasm" -c "$1" | sed 's:/\*[0-9a-f]*\*/::g'; }
resources() { grep -E 'Used|spill|stack' "$1"; }

bad=0 count=0
for old_ptx in "$old"/*.ptx; do
  kernel="$(basename "$old_ptx" .ptx)"
  count=$((count + 1))
  if [[ ! -f "$new/$kernel.ptx" ]]; then
    echo "missing in $new: $kernel"; bad=1; continue
  fi
  if [[ -n $nvdisasm ]]; then
    if ! cmp -s <(sass_code "$old/$kernel.cubin") <(sass_code "$new/$kernel.cubin"); then
      echo "SASS differs: $kernel"; bad=1
    fi
  elif ! cmp -s <(ptx_code "$old_ptx") <(ptx_code "$new/$kernel.ptx"); then
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
what=PTX
[[ -n $nvdisasm ]] && what=SASS
[[ $bad -eq 0 ]] && echo "$count kernels: the same $what and ptxas resources"
exit $bad
