#!/usr/bin/env bash
# Nsight Compute's warp-state, scheduler, occupancy and instruction sections on the decode kernel
# of each point, for this tree (A) and this tree with PATCH applied (B), in one GPU session: why
# one version is slower, in stall reasons rather than microseconds. profile_a.txt / profile_b.txt
# in OUTDIR and a summary of the lines that say most.
#   dev/profile_ab_gpu.sh OUTDIR PATCH TYPE:DEPTH[:NQ] ...    e.g. q4_0:262144:8
set -uo pipefail
out=${1:?usage: dev/profile_ab_gpu.sh OUTDIR PATCH TYPE:DEPTH[:NQ] ...}
patch=${2:?patch file}
shift 2
mkdir -p "$out"
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
# shellcheck source=dev/ab_trees.sh
source dev/ab_trees.sh
ab_build_trees "$out" "$patch" prof || exit 1
for side in a b; do
  bench=$bench_a
  [ "$side" = b ] && bench=$bench_b
  for pt in "$@"; do
    IFS=: read -r t d nq <<< "$pt"
    echo "=== $side $t depth $d n_q ${nq:-1} decode_kernel"
    timeout 120 ncu --clock-control none -k regex:decode_kernel -c 1 --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section Occupancy \
      --section LaunchStats --section InstructionStats \
      $bench --backend cuda -ctk "$t" -d "$d" -n "${nq:-1}" -r 1 --warmup 1 --no-progress 2>&1 |
      grep -v "^kvflash\|^memory\|^inputs"
  done > "$out/profile_$side.txt" 2>&1
done
grep -hE "^===|Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|Executed Instructions  " \
  "$out/profile_a.txt" "$out/profile_b.txt" | tee "$out/summary.txt"
