#!/usr/bin/env bash
# Where one decode call spends its time, per CTA: builds kvflash-bench with -DKVFLASH_TIMELINE
# (thread 0 of every decode and merge CTA records the global timer at each phase: entry, after
# griddepcontrol.wait, tile 0 issued, tile 0 landed, loop end, epilogue done, exit; merge: entry,
# after wait, done), runs one bench process per point and prints the last call's phases
# (µs after the first decode CTA started, min / p10 / median / p90 / max over CTAs). With
# KVFLASH_TL_SASS=1 also the SASS of the one-token kernels of a few types (sass_*.txt.gz).
#   dev/timeline_gpu.sh OUTDIR [TYPE:DEPTH[:NQ] ...]
set -uo pipefail
out=${1:?usage: dev/timeline_gpu.sh OUTDIR [TYPE:DEPTH[:NQ] ...]}
shift
mkdir -p "$out"
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
points=("$@")
[ ${#points[@]} -eq 0 ] && points=(f16:1024 f16:4096 f16:32768 q4_0:4096 q4_0:32768 q8_0:4096
                                   turbo3:4096 f16:4096:8)
cmake -S . -B build/tl -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DKVFLASH_CUDA_ALL_PAIRS=ON -DCMAKE_CUDA_FLAGS=-DKVFLASH_TIMELINE \
  -DCMAKE_CXX_FLAGS=-DKVFLASH_TIMELINE "${prefix_args[@]}" \
  > "$out/tl_build.txt" 2>&1 &&
  cmake --build build/tl -j "$(nproc)" --target kvflash-bench >> "$out/tl_build.txt" 2>&1 ||
  { tail -30 "$out/tl_build.txt"; exit 1; }
bench=build/tl/tools/bench/kvflash-bench
for pt in "${points[@]}"; do
  IFS=: read -r t d n <<< "$pt"
  echo "=== $t depth $d q ${n:-1}"
  $bench --backend cuda -ctk "$t" -d "$d" -n "${n:-1}" -r 20 --warmup 5 --no-progress -o csv \
    2> "$out/tl_err.txt" | tail -n 1 | cut -d, -f4,11,12,15,18
  grep "^timeline" "$out/tl_err.txt"
done 2>&1 | tee "$out/timeline.txt"
obj=build/tl/src/backends/cuda/CMakeFiles/kvflash_cuda.dir/decode/instances
if [ -n "${KVFLASH_TL_SASS:-}" ] && command -v cuobjdump > /dev/null; then
  for t in f16 q8_0 q4_0 turbo3 turbo4; do
    cuobjdump -sass "$obj/decode_k_${t}_r1.cu.o" | gzip -9 > "$out/sass_${t}_r1.txt.gz"
  done
fi
ls -la "$out"
