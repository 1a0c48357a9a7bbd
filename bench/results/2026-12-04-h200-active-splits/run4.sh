#!/usr/bin/env bash
# The fourth device call of this record: what the early exit of inactive splits costs where it
# happens (q8_0 at 8K-32K, f16 at 4K lost 2-4% in run 3). An experiment knob (not committed),
# KVFLASH_CUDA_SPLIT_EXIT: 0 exit writing the empty state (run 3's code), 1 the same stores
# with an L2 evict_last policy, 2 no exit (the splits without keys run as in HEAD); the code:
# active-splits.patch plus split-exit-experiment.diff (a diff of the two patches).
set -u
out=${1:?usage: run4.sh OUT}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$out/gpu.txt"
AB_CHECKS=first AB_DEADLINE=${AB_DEADLINE:-440} \
  AB_ENVS="KVFLASH_CUDA_SPLIT_EXIT=0 KVFLASH_CUDA_SPLIT_EXIT=1 KVFLASH_CUDA_SPLIT_EXIT=2" \
  AB_EXTRA="-ctk q4_0 -n 8 -d 4096 -r 20 --warmup 5|-ctk q8_0 --heads 32/4 -d 16384 -r 20 --warmup 5|-ctk f16 -d 4096,8192 -r 20 --warmup 5|-ctk turbo3,q4_0 -d 4096,32768 -r 20 --warmup 5|-ctk turbo4 -d 1024,2048 -r 20 --warmup 5" \
  scripts/ab_env_gpu.sh /tmp/ab 4 -- -ctk q8_0 -d 1024,4096,8192,16384,32768 -r 20 --warmup 5
cp /tmp/ab/variants.md /tmp/ab/checks.txt "$out/" 2>/dev/null
tar czf "$out/ab.tgz" -C /tmp ab
