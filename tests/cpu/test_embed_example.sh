#!/bin/sh
# The embedding example, as a user builds it: install flashjit into a temporary prefix, build
# examples/embed against it through find_package(flashjit) + flashjit_add_kernels, then run it
# with NVRTC hidden. It must take its kernels from the embedded bundle and then either report
# the missing GPU (exit 3, CI) or compute a correct result (exit 0, the GPU machine).
# usage: test_embed_example.sh <flashjit build dir> <flashjit source dir> <arch, e.g. sm_90a>
set -eu
build=$1
source=$2
arch=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/flashjit-embed-XXXXXX")
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$source/examples/embed" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCMAKE_BUILD_TYPE=Release -DEMBED_ARCHS="$arch" > "$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" -j2 > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }

status=0
FLASHJIT_NVRTC_LIBRARY=/nonexistent/libnvrtc.so.13 FLASHJIT_DISABLE_CACHE=1 \
  "$work/build/embed_attention" > "$work/run.log" 2>&1 || status=$?
cat "$work/run.log"
grep -q "from the embedded bundle" "$work/run.log" ||
  { echo "FAIL: the kernels did not come from the embedded bundle"; exit 1; }
case $status in
  0) echo "PASS: correct result from embedded kernels, without NVRTC" ;;
  3) grep -q "no GPU" "$work/run.log" || { echo "FAIL: exit 3 without the no-GPU report"; exit 1; }
     echo "PASS: embedded kernels found without NVRTC; no GPU here" ;;
  *) echo "FAIL: embed_attention exited with $status"; exit 1 ;;
esac
