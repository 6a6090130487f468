#!/usr/bin/env bash
# Installs Strata's Debian dependencies (only what is missing) and builds it:
# the given ninja targets, or everything (tests and benchmarks too).
# Idempotent: a second run installs nothing and rebuilds only what changed.
# Usage: scripts/setup.sh [TARGET...]   or   scripts/setup.sh --packages-only
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ pkg-config
  libdnnl-dev libopenblas-dev libopenblas0-openmp
  ocl-icd-opencl-dev opencl-headers  # the opencl backend (and Debian's oneDNN CMake package requires them)
  libclblast-dev  # the opencl backend's GEMMs
  pocl-opencl-icd  # an OpenCL device on the CPU, so the opencl backend runs everywhere
  libsentencepiece-dev
  libpcre2-dev libicu-dev  # HuggingFace tokenizer.json: Unicode pre-tokenizer regexes, NFC (Qwen2)
  zlib1g-dev libzstd-dev  # strata data prepare reads gzip- and zstd-compressed inputs
  nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libfmt-dev libspdlog-dev
  libgtest-dev libgmock-dev googletest
  libopenmpi-dev openmpi-bin libhwloc-dev
  iproute2  # the two-"host" data-parallel test (network namespaces)
  python3-torch python3-numpy
  python3-matplotlib  # strata report's plots
  python3-venv  # the golden tests against PyPI's tokenizers make a venv
  chromium  # the report test renders the page in headless Chromium
  bible-kjv bible-kjv-text
)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

[[ "${1:-}" == "--packages-only" ]] && exit 0

build_dir=${STRATA_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
ninja -C "$build_dir" "$@"
