#!/usr/bin/env bash
# One device call for a CUDA change: build this tree's GPU tests, CUDA parity and bench, run the
# decode tests, parity and memcheck over the decode and graph tests (each under a timeout, so a
# hanging kernel costs seconds, not the call's whole limit), and only if tests and parity pass,
# the A/B of dev/ab_gpu.sh against the tree with x.patch reverse-applied (make it with
# `git add -N NEW_FILES; git diff HEAD > x.patch`: A = the working tree, B = HEAD; a plain
# `git diff` leaves out new files and staged deletions). Results in /tmp/ab (tar it into $OUT).
# AB_RACECHECK=N adds N runs of compute-sanitizer racecheck over the decode and graph tests.
#   dev/ab_gpu_checked.sh BENCH FLAGS...   e.g. -ctk q4_0,turbo3 -d 32768,1048576 -r 30
set -u
cd "$(dirname "$0")/.." || exit 1
mkdir -p /tmp/ab
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
cmake -S . -B build/ab-a -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DKVFLASH_CUDA_ALL_PAIRS=ON "${prefix_args[@]}" > /tmp/ab/cfg.txt 2>&1
cmake --build build/ab-a -j "$(nproc)" --target test_gpu_attention kvflash-parity kvflash-bench \
  > /tmp/ab/build_tests.txt 2>&1 || { tail -30 /tmp/ab/build_tests.txt; exit 1; }
# shellcheck source=dev/ab_trees.sh
source dev/ab_trees.sh
ab_gpu_checks /tmp/ab build/ab-a "" 1 "${AB_RACECHECK:-0}" || exit 2
timeout 330 dev/ab_gpu.sh /tmp/ab x.patch -R 3 -- "$@" > /tmp/ab/stdout.txt 2>&1
echo "ab rc=$?"
cat /tmp/ab/ab.md
