#!/usr/bin/env bash
# The device call of this record, from the repository root, on the tree of the change with
#   git diff HEAD -- src include tools tests CMakeLists.txt > x.patch
# (HEAD = the commit before the change). scripts/ab_env_gpu.sh builds the tree (A) and HEAD (B)
# (or, with AB_PREBUILT=DIR, takes them from scripts/ab_prebuild.sh DIR, carried),
# runs the GPU tests and CUDA parity (memcheck and racecheck too), then kvflash-bench of B and A
# in turns.
#   bench/results/2026-12-04-h200-imma-q8k/run.sh OUT
set -u
out=${1:?usage: run.sh OUT}
f="-r 20 --warmup 5"
extra="-ctk q8_0 -ctv turbo3,turbo4 --heads 32/4 -d 131072,1048576 $f|-ctk q8_0 -ctv turbo3,turbo4 --head-dim 256 -d 131072 $f|-ctk q8_0 -ctv q8_0,q4_0 -d 1048576 $f"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu.txt"
# shellcheck disable=SC2086  # flag lists, split on purpose
AB_CHECKS=first AB_DEADLINE=${AB_DEADLINE:-420} AB_ENVS="KVFLASH_NONE=1" AB_EXTRA="$extra" \
  scripts/ab_env_gpu.sh /tmp/ab 3 -- -ctk q8_0 \
  -ctv turbo2,turbo3,turbo4 -d 4096,32768,1048576 $f
cp /tmp/ab/variants.md /tmp/ab/checks.txt "$out/" 2>/dev/null
tar czf "$out/ab.tgz" -C /tmp ab
