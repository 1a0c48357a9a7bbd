#!/usr/bin/env bash
# The third device call of this record, on active-splits.patch (split 0..active with a tile as
# the least chunk and one CTA per SM as the floor; inactive splits write an empty state, the merge
# is HEAD's; DecodeParams kept at 768 bytes): the GPU tests, CUDA parity, memcheck and racecheck,
# then kvflash-bench of HEAD (B) and the tree (A) in turns, 4 rounds.
#   git add -N src/backends/cuda/decode/decode_split.hpp
#   git diff HEAD -- src include tools tests CMakeLists.txt > x.patch
#   bench/results/2026-12-04-h200-active-splits/run3.sh OUT
set -u
out=${1:?usage: run3.sh OUT}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu.txt"
AB_CHECKS=first AB_DEADLINE=${AB_DEADLINE:-470} AB_ENVS="KVFLASH_NONE=1" \
  AB_EXTRA="-ctk q4_0,f16 -n 8 -d 4096,16384 -r 20 --warmup 5|-ctk q8_0,q4_0 --heads 32/4 -d 4096,16384 -r 20 --warmup 5|-ctk q8_0 -ctv turbo4 -d 4096,16384 -r 20 --warmup 5|-ctk f16,q8_0,q4_0,turbo3 -d 131072 -r 20 --warmup 5" \
  scripts/ab_env_gpu.sh /tmp/ab 4 -- -ctk f16,q8_0,q4_0,turbo2,turbo3,turbo4 \
  -d 1024,2048,4096,8192,16384,32768 -r 20 --warmup 5
cp /tmp/ab/variants.md /tmp/ab/checks.txt "$out/" 2>/dev/null
tar czf "$out/ab.tgz" -C /tmp ab
