#!/usr/bin/env bash
# Nsight Compute's warp-state, scheduler, occupancy and instruction sections on the decode kernel
# of each point, for this tree (A) and this tree with PATCH applied (B), in one GPU session: why
# one version is slower, in stall reasons rather than microseconds. profile_a.txt / profile_b.txt
# in OUTDIR and a summary of the lines that say most.
#   scripts/profile_ab_gpu.sh OUTDIR PATCH TYPE:DEPTH[:NQ] ...    e.g. q4_0:262144:8
set -uo pipefail
out=${1:?usage: scripts/profile_ab_gpu.sh OUTDIR PATCH TYPE:DEPTH[:NQ] ...}
patch=${2:?patch file}
shift 2
mkdir -p "$out"
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
rm -rf /tmp/prof-b && mkdir -p /tmp/prof-b &&
  tar cf - --exclude=./build --exclude=./.git . | tar xf - -C /tmp/prof-b
(cd /tmp/prof-b && patch -p1 < "$OLDPWD/$patch") > "$out/patch.txt" 2>&1 ||
  { echo "patch failed"; cat "$out/patch.txt"; exit 1; }
jobs=$(nproc)
build() {  # src dir, build dir
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    "${prefix_args[@]}" > "$out/build_$(basename "$2").txt" 2>&1 &&
    cmake --build "$2" -j "$((jobs / 2))" --target kvflash-bench >> "$out/build_$(basename "$2").txt" 2>&1
}
build . build/prof-a & pa=$!
build /tmp/prof-b /tmp/prof-b/build/prof-b & pb=$!
wait $pa || { echo "build A failed"; tail -20 "$out/build_prof-a.txt"; exit 1; }
wait $pb || { echo "build B failed"; tail -20 "$out/build_prof-b.txt"; exit 1; }
for side in a b; do
  bench=build/prof-a/tools/bench/kvflash-bench
  [ "$side" = b ] && bench=/tmp/prof-b/build/prof-b/tools/bench/kvflash-bench
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
