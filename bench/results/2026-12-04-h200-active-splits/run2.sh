#!/usr/bin/env bash
# The second device call of this record (an intermediate version, not kept: inactive splits write an empty
# state and the merge is HEAD's; a floor of one CTA per SM): as run.sh, variants default (one
# tile), 0 and 256 keys, more types and depths.
#   git add -N src/backends/cuda/decode/decode_split.hpp
#   git diff HEAD -- src include tools tests CMakeLists.txt > x.patch
#   bench/results/2026-12-04-h200-active-splits/run2.sh OUT
set -u
out=${1:?usage: run2.sh OUT}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu.txt"
AB_CHECKS=first AB_DEADLINE=${AB_DEADLINE:-440} \
  AB_ENVS="KVFLASH_CUDA_MIN_CHUNK_DEFAULT=1 KVFLASH_CUDA_MIN_CHUNK=0 KVFLASH_CUDA_MIN_CHUNK=256" \
  AB_EXTRA="-ctk q4_0,f16 -n 8 -d 4096,16384 -r 20 --warmup 5|-ctk q8_0,q4_0 --heads 32/4 -d 4096,16384 -r 20 --warmup 5|-ctk q8_0 -ctv turbo4 -d 4096,16384 -r 20 --warmup 5" \
  scripts/ab_env_gpu.sh /tmp/ab 3 -- -ctk f16,q8_0,q4_0,turbo2,turbo3,turbo4 \
  -d 1024,2048,4096,8192,16384,32768 -r 20 --warmup 5
cp /tmp/ab/variants.md /tmp/ab/checks.txt "$out/" 2>/dev/null
tar czf "$out/ab.tgz" -C /tmp ab
