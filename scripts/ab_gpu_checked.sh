#!/usr/bin/env bash
# One device call for a CUDA change: build this tree's GPU tests, CUDA parity and bench, run the
# decode tests, parity and memcheck over the decode and graph tests (each under a timeout, so a
# hanging kernel costs seconds, not the call's whole limit), and only if tests and parity pass,
# the A/B of scripts/ab_gpu.sh against the tree with x.patch reverse-applied (make it with
# `git add -N NEW_FILES; git diff HEAD > x.patch`: A = the working tree, B = HEAD; a plain
# `git diff` leaves out new files and staged deletions). Results in /tmp/ab (tar it into $OUT).
# AB_RACECHECK=N adds N runs of compute-sanitizer racecheck over the decode and graph tests.
#   scripts/ab_gpu_checked.sh BENCH FLAGS...   e.g. -ctk q4_0,turbo3 -d 32768,1048576 -r 30
set -u
cd "$(dirname "$0")/.." || exit 1
mkdir -p /tmp/ab
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
cmake -S . -B build/ab-a -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  "${prefix_args[@]}" > /tmp/ab/cfg.txt 2>&1
cmake --build build/ab-a -j "$(nproc)" --target test_gpu_attention kvflash-parity kvflash-bench \
  > /tmp/ab/build_tests.txt 2>&1 || { tail -30 /tmp/ab/build_tests.txt; exit 1; }
timeout 90 build/ab-a/tests/test_gpu_attention > /tmp/ab/tests.txt 2>&1
trc=$?
echo "tests rc=$trc" | tee -a /tmp/ab/tests.txt
tail -n 4 /tmp/ab/tests.txt
timeout 150 build/ab-a/tools/parity/kvflash-parity --backend cuda > /tmp/ab/parity.txt 2>&1
prc=$?
echo "parity rc=$prc" | tee -a /tmp/ab/parity.txt
tail -n 3 /tmp/ab/parity.txt
grep -m5 FAIL /tmp/ab/parity.txt
[ $trc -eq 0 ] && [ $prc -eq 0 ] || exit 2
timeout 150 compute-sanitizer --tool memcheck build/ab-a/tests/test_gpu_attention \
  --gtest_filter='Cases/CudaDecode.*:CudaGraph.*' > /tmp/ab/memcheck.txt 2>&1
echo "memcheck rc=$?"
grep "ERROR SUMMARY" /tmp/ab/memcheck.txt | tail -2
# AB_RACECHECK=N: racecheck over the same tests too, N runs (for changes to barriers or shared
# memory; one hazard has shown in one run of four: repeat it).
for i in $(seq "${AB_RACECHECK:-0}"); do
  rc_out=/tmp/ab/racecheck.txt
  [ "$i" -gt 1 ] && rc_out=/tmp/ab/racecheck_$i.txt
  KVFLASH_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 1 \
    build/ab-a/tests/test_gpu_attention \
    --gtest_filter='Cases/CudaDecode.*:CudaGraph.*' > "$rc_out" 2>&1
  echo "racecheck $i rc=$?"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$rc_out" | tail -2
done
timeout 330 scripts/ab_gpu.sh /tmp/ab x.patch -R 3 -- "$@" > /tmp/ab/stdout.txt 2>&1
echo "ab rc=$?"
cat /tmp/ab/ab.md
