#!/usr/bin/env bash
# Why q8_0/q8_0 at 1M is slower with the int8 Q.K^T: SASS of the one-token kernels (cuobjdump,
# scripts/sass_blocks.py) and Nsight Compute's stall reasons (scripts/sass_profile.py) of A (the
# change) and B (HEAD), from binaries built on the CPU machine (scripts/ab_prebuild.sh DIR; carry
# DIR and .debs):   bench/results/2026-12-04-h200-imma-q8k/profile.sh DIR OUT
set -u
dir=${1:?prebuilt dir}
out=${2:?out}
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
# shellcheck source=scripts/ab_trees.sh
source scripts/ab_trees.sh
ab_unpack_prebuilt "$dir" build/ab-a || exit 1
declare -A bin=([a]=build/ab-a/tools/bench/kvflash-bench [b]=build/ab-a/bench-b/kvflash-bench)
for s in a b; do
  cuobjdump -sass "${bin[$s]}" > "/tmp/$s.sass" 2>&1
  for k in KvTypeE3ELS3_3ELi1ELb0 KvTypeE3ELS3_7ELi1ELb0; do
    python3 scripts/sass_blocks.py "/tmp/$s.sass" "$k" --min-mma 1 > "$out/blocks_${s}_$k.txt" 2>&1
  done
  awk '/Function : .*KvTypeE3ELS3_3ELi1ELb0/{p=1} p&&/Function : /&&!/KvTypeE3ELS3_3ELi1ELb0/{p=0} p' \
    "/tmp/$s.sass" | gzip > "$out/sass_${s}_q8q8.txt.gz"
  for pt in q8_0:q8_0 q8_0:turbo4; do
    IFS=: read -r kt vt <<< "$pt"
    timeout 150 ncu --clock-control none -k regex:decode_kernel -c 1 --import-source no \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --section Occupancy --section LaunchStats --section InstructionStats \
      --section MemoryWorkloadAnalysis --section SourceCounters -f -o "/tmp/${s}_$vt" \
      "${bin[$s]}" --backend cuda -ctk "$kt" -ctv "$vt" -d 1048576 -r 1 --warmup 1 --no-progress \
      > "$out/ncu_${s}_$vt.log" 2>&1
    ncu -i "/tmp/${s}_$vt.ncu-rep" --page details > "$out/details_${s}_$vt.txt" 2>&1
    ncu -i "/tmp/${s}_$vt.ncu-rep" --page source --csv --print-source sass 2> /dev/null |
      gzip > "/tmp/${s}_$vt.csv.gz"
    python3 scripts/sass_profile.py "/tmp/${s}_$vt.csv.gz" --top 40 > "$out/stalls_${s}_$vt.txt" 2>&1
  done
done
for f in "$out"/details_*.txt; do
  echo "== $f"
  grep -E "Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|Executed Instructions  |Block Limit" "$f"
done | tee "$out/summary.txt" /tmp/summary.txt
cd "$out" && tar czf /tmp/prof.tgz ./* && rm -f ./* && mv /tmp/prof.tgz . && cp /tmp/summary.txt . 2>/dev/null
