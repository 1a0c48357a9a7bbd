#!/usr/bin/env bash
# Where the decode kernel's warps stall, per point: builds kvflash-bench, runs Nsight Compute's
# warp-state, scheduler, instruction and occupancy sections on the decode kernel of each
# TYPE:DEPTH point (profile.txt), the per-instruction source page of the first point
# (first_sass.csv.gz, read it with dev/sass_profile.py), and the SASS of the one-token kernels
# of the points' K types (sass_<type>_r1.txt.gz: their code sizes and loop layout).
#   dev/profile_gpu.sh OUTDIR [TYPE:DEPTH ...]    (default: turbo3, turbo4, q8_0, q4_0 at 256K)
set -uo pipefail
out=${1:?usage: dev/profile_gpu.sh OUTDIR [TYPE:DEPTH ...]}
shift
mkdir -p "$out"
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
points=("$@")
[ ${#points[@]} -eq 0 ] && points=(turbo3:262144 turbo4:262144 q8_0:262144 q4_0:262144)
cmake -S . -B build/prof -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DKVFLASH_CUDA_ALL_PAIRS=ON "${prefix_args[@]}" > "$out/build.txt" 2>&1 &&
  cmake --build build/prof -j "$(nproc)" --target kvflash-bench >> "$out/build.txt" 2>&1 ||
  { tail -30 "$out/build.txt"; exit 1; }
bench=build/prof/tools/bench/kvflash-bench
for pt in "${points[@]}"; do
  IFS=: read -r t d <<< "$pt"
  echo "=== $t depth $d decode_kernel"
  ncu --clock-control none -k regex:decode_kernel -c 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats \
    $bench --backend cuda -ctk "$t" -d "$d" -r 1 --warmup 1 --no-progress 2>&1 |
    grep -v "^kvflash\|^memory\|^inputs"
done > "$out/profile.txt" 2>&1
IFS=: read -r t d <<< "${points[0]}"
ncu --clock-control none -k regex:decode_kernel -c 1 --set full --import-source yes \
  -o "$out/first" -f $bench --backend cuda -ctk "$t" -d "$d" -r 1 --warmup 1 --no-progress \
  > "$out/first.log" 2>&1 &&
  ncu -i "$out/first.ncu-rep" --page source --csv --print-source sass 2>> "$out/first.log" |
  gzip -9 > "$out/first_sass.csv.gz"
rm -f "$out/first.ncu-rep"
obj=build/prof/src/backends/cuda/CMakeFiles/kvflash_cuda.dir/decode/instances
for pt in "${points[@]}"; do
  t=${pt%%:*}
  [ -f "$out/sass_${t}_r1.txt.gz" ] || cuobjdump -sass "$obj/decode_k_${t}_r1.cu.o" |
    gzip -9 > "$out/sass_${t}_r1.txt.gz"
done
grep -E "^===|Duration|No Eligible|Issued Warp|Warp Cycles Per Issued|instruction cache|represents" \
  "$out/profile.txt"
ls -la "$out"
