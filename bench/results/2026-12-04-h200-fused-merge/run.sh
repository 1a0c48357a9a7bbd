#!/usr/bin/env bash
# The device call of this record, from the repository root, on the tree of the change with
#   git diff HEAD -- src include tools tests CMakeLists.txt > x.patch
# (HEAD = the commit before the change). scripts/ab_env_gpu.sh builds the tree (A) and HEAD (B),
# runs the GPU tests and CUDA parity (memcheck and racecheck too), then kvflash-bench of B and A
# in turns.
#   bench/results/2026-12-04-h200-fused-merge/run.sh OUT
set -u
out=${1:?usage: run.sh OUT}
f="-r 20 --warmup 5"
extra="-ctk q4_0,f16 -n 8 -d 4096,32768 $f|-ctk q8_0,q4_0 --heads 32/4 -d 4096,131072 $f|-ctk q8_0,q4_0 --head-dim 256 -d 4096,131072 $f|-ctk q8_0 -ctv turbo4 -d 4096 $f"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu.txt"
# shellcheck disable=SC2086  # flag lists, split on purpose
AB_CHECKS=first AB_DEADLINE=${AB_DEADLINE:-420} AB_ENVS="KVFLASH_NONE=1" AB_EXTRA="$extra" \
  scripts/ab_env_gpu.sh /tmp/ab 3 -- -ctk f16,q8_0,q4_0,turbo3 \
  -d 1024,4096,32768,1048576 $f
cp /tmp/ab/variants.md /tmp/ab/checks.txt "$out/" 2>/dev/null
tar czf "$out/ab.tgz" -C /tmp ab
