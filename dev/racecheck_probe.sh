#!/usr/bin/env bash
# Repeats compute-sanitizer racecheck (full reports) over a gtest filter of the GPU decode tests,
# for a hazard that shows in some runs only. Builds test_gpu_attention first.
#   dev/racecheck_probe.sh OUTDIR [RUNS [FILTER]]
#   e.g. dev/racecheck_probe.sh "$OUT" 3 'Cases/CudaDecode.*d256*:Cases/CudaDecode.*d512*'
set -u
out=${1:?usage: dev/racecheck_probe.sh OUTDIR [RUNS [FILTER]]}
runs=${2:-3}
filter=${3:-Cases/CudaDecode.*d256*:Cases/CudaDecode.*d512*}
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$out"
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
cmake -S . -B build/rc -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DKVFLASH_CUDA_ALL_PAIRS=ON "${prefix_args[@]}" > "$out/cfg.txt" 2>&1
cmake --build build/rc -j "$(nproc)" --target test_gpu_attention > "$out/build.txt" 2>&1 ||
  { tail -20 "$out/build.txt"; exit 1; }
for i in $(seq "$runs"); do
  KVFLASH_GPU_TEST_QUICK=1 timeout 100 compute-sanitizer --tool racecheck --racecheck-report all \
    build/rc/tests/test_gpu_attention --gtest_filter="$filter" > "$out/rc_$i.txt" 2>&1
  echo "run $i rc=$?"
  grep -E "RACECHECK SUMMARY" "$out/rc_$i.txt"
done
