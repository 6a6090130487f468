#!/usr/bin/env bash
# Sets up, builds and runs every test (C++ unit tests, MPI collective tests,
# PyTorch golden tests) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir "${STRATA_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
