#!/usr/bin/env bash
# The device calls of this record, from the repository root, after
#   git apply bench/results/2026-12-04-h200-active-splits/active-splits.patch   (run 3's code)
#   git add -N src/backends/cuda/decode/decode_split.hpp
#   git diff HEAD -- src include tools tests CMakeLists.txt > x.patch
# (runs 1 and 2 ran earlier forms, not kept: see README.md; run 4 needs
# split-exit-experiment.diff's knob on top). scripts/ab_env_gpu.sh builds the tree (A) and HEAD
# (B), runs the GPU tests and CUDA parity under every variant (memcheck and racecheck under the
# first), then kvflash-bench of B and A under each variant in turns.
#   bench/results/2026-12-04-h200-active-splits/run.sh OUT 1|2|3|4
set -u
out=${1:?usage: run.sh OUT RUN}
run=${2:?usage: run.sh OUT RUN}
f="-r 20 --warmup 5"
depths=1024,2048,4096,8192,16384,32768
rounds=3 types=f16,q8_0,q4_0,turbo2,turbo3,turbo4
extra="-ctk q4_0,f16 -n 8 -d 4096,16384 $f|-ctk q8_0,q4_0 --heads 32/4 -d 4096,16384 $f"
case $run in
  1) envs="KVFLASH_CUDA_MIN_CHUNK_DEFAULT=1 KVFLASH_CUDA_MIN_CHUNK=0 KVFLASH_CUDA_MIN_CHUNK=256 KVFLASH_CUDA_MIN_CHUNK=512"
     types=f16,q8_0,q4_0,turbo2,turbo3 depths=1024,2048,4096,8192,16384 ;;
  2) envs="KVFLASH_CUDA_MIN_CHUNK_DEFAULT=1 KVFLASH_CUDA_MIN_CHUNK=0 KVFLASH_CUDA_MIN_CHUNK=256"
     extra="$extra|-ctk q8_0 -ctv turbo4 -d 4096,16384 $f" ;;
  3) envs="KVFLASH_NONE=1" rounds=4
     extra="$extra|-ctk q8_0 -ctv turbo4 -d 4096,16384 $f|-ctk f16,q8_0,q4_0,turbo3 -d 131072 $f" ;;
  4) envs="KVFLASH_CUDA_SPLIT_EXIT=0 KVFLASH_CUDA_SPLIT_EXIT=1 KVFLASH_CUDA_SPLIT_EXIT=2" rounds=4
     types=q8_0 depths=1024,4096,8192,16384,32768
     extra="-ctk q4_0 -n 8 -d 4096 $f|-ctk q8_0 --heads 32/4 -d 16384 $f|-ctk f16 -d 4096,8192 $f|-ctk turbo3,q4_0 -d 4096,32768 $f|-ctk turbo4 -d 1024,2048 $f" ;;
  *) echo "run: 1, 2, 3 or 4" >&2; exit 2 ;;
esac
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu.txt"
# shellcheck disable=SC2086  # flag lists, split on purpose
AB_CHECKS=first AB_DEADLINE=${AB_DEADLINE:-440} AB_ENVS="$envs" AB_EXTRA="$extra" \
  scripts/ab_env_gpu.sh /tmp/ab "$rounds" -- -ctk "$types" -d "$depths" $f
cp /tmp/ab/variants.md /tmp/ab/checks.txt "$out/" 2>/dev/null
tar czf "$out/ab.tgz" -C /tmp ab
