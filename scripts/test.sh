#!/usr/bin/env bash
# The README's test command: install what is missing, build everything (the CUDA backend too when
# nvcc is found: compile only, so a CUDA build break never lands) with warnings as errors, and run
# every CPU test (GPU tests are labelled "gpu" and skip without a GPU); on x86-64 also the AArch64
# cross build (preset "neon": the NEON kernels) with its CPU kernel tests under qemu-user.
#   scripts/test.sh           Release build (preset "ci") + all tests, then the "neon" preset
#   scripts/test.sh --asan    also the AddressSanitizer/UBSan build (preset "asan") + its tests,
#                             and the ThreadSanitizer build of the thread tests (preset "tsan")
set -euo pipefail
cd "$(dirname "$0")/.."
neon=0
if [ "$(uname -m)" = "x86_64" ]; then neon=1; fi
if [ $neon -eq 1 ]; then scripts/setup.sh --neon; else scripts/setup.sh; fi

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
if [ $neon -eq 1 ]; then run_preset neon; fi
if [ "${1:-}" = "--asan" ]; then
  run_preset asan
  run_preset tsan
fi
