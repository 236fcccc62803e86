#!/usr/bin/env bash
# Makes a fresh Debian machine ready to build flashjit, then builds it into build/.
# Idempotent: installs only the packages that are missing, and re-running only rebuilds
# what changed. `setup.sh --install-only PKG...` installs those packages the same way (if
# missing) and builds nothing: the fuzz and sanitizer scripts' extra tools. On a machine without apt-get (the GPU machine: libraries present, no
# package registry) the install step is skipped.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${repo_root}/build"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"

# Debian packages the build and the tests need (FileCheck comes from llvm-19-tools).
packages=(cmake g++ make libfmt-dev libyaml-cpp-dev doctest-dev llvm-19-tools
          libssl-dev libcli11-dev nlohmann-json3-dev)

say() { echo "[setup] $*"; }

install_missing_packages() {
  if ! command -v apt-get >/dev/null 2>&1; then
    say "no apt-get on this machine: skipping the package install step (the libraries must already be present)"
    return
  fi
  local missing=()
  local pkg
  for pkg in "${packages[@]}"; do
    # dpkg -s succeeds for removed-but-configured packages too; check the status line.
    if ! dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed'; then
      missing+=("$pkg")
    fi
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    say "all ${#packages[@]} Debian packages present"
    return
  fi
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
      say "ERROR: missing packages (${missing[*]}) and not root, and no sudo to install them" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  say "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # A machine with apt-get but no reachable registry (our GPU machine: its libraries come
  # with the image, cmake from pip) cannot install; the configure step below then says
  # precisely what is missing, if anything is.
  if ! { "${sudo[@]}" apt-get update -qq &&
         "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; }; then
    say "WARNING: could not install ${missing[*]}; going on with what this machine has" >&2
  fi
}

check_cuda() {
  # NVRTC and the driver API headers come from the CUDA toolkit, which is not a Debian
  # package we install: it is expected where NVIDIA's installer puts it.
  if [[ ! -x "${cuda_home}/bin/nvcc" ]] || ! compgen -G "${cuda_home}/lib64/libnvrtc.so*" >/dev/null; then
    say "ERROR: the CUDA toolkit (nvcc and NVRTC) was not found at ${cuda_home}." >&2
    say "       Install the CUDA toolkit 12.x or 13.x (NVIDIA's cuda-toolkit package or runfile)" >&2
    say "       so that ${cuda_home}/bin/nvcc and ${cuda_home}/lib64/libnvrtc.so exist," >&2
    say "       or set CUDA_HOME to where it is installed." >&2
    exit 1
  fi
  say "CUDA toolkit: ${cuda_home} ($("${cuda_home}/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
}

build() {
  say "configuring into ${build_dir} (Release)"
  mkdir -p "${build_dir}"
  cmake -S "${repo_root}" -B "${build_dir}" -DCMAKE_BUILD_TYPE=Release \
        -DCUDAToolkit_ROOT="${cuda_home}" >"${build_dir}/configure.log" 2>&1 || {
    cat "${build_dir}/configure.log" >&2
    say "ERROR: cmake configure failed (log above)" >&2
    exit 1
  }
  say "building with $(nproc) jobs"
  cmake --build "${build_dir}" -j"$(nproc)"
  say "built: ${build_dir}/flashjit"
}

if [[ ${1:-} == --install-only ]]; then
  shift
  packages=("$@")
  install_missing_packages
  exit 0
fi
install_missing_packages
check_cuda
build
