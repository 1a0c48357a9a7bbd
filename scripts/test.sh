#!/usr/bin/env bash
# The README's test command: install what is missing, build everything (the CUDA backend too when
# nvcc is found: compile only, so a CUDA build break never lands) with warnings as errors, and run
# every CPU test (GPU tests are labelled "gpu" and skip without a GPU).
#   scripts/test.sh           Release build (preset "ci") + all tests
#   scripts/test.sh --asan    also the AddressSanitizer/UBSan build (preset "asan") + its tests,
#                             and the ThreadSanitizer build of the thread tests (preset "tsan")
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

jobs=$(nproc)
run_preset() {
  local preset=$1
  echo "== kvflash: configure + build ($preset)"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  echo "== kvflash: tests ($preset)"
  ctest --preset "$preset" -j "$jobs" --timeout 1200
}

run_preset ci
if [ "${1:-}" = "--asan" ]; then
  run_preset asan
  run_preset tsan
fi
