#!/usr/bin/env bash
# The README's first command: build kvflash (Release) and show what it is for on an embedded
# default, in under a minute once built on a 2-core machine:
#   1. decode speed on the best backend for f16, q8_0, q4_0 and turbo3 KV at two depths,
#   2. accuracy of every KV type against float64 attention on realistic synthetic KV,
#   3. what the KV cache of Llama-3.1-8B costs per type, and how long a context fits 24 GiB.
# Extra arguments go to kvflash-bench (e.g. scripts/demo.sh -d 131072 -t 1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target kvflash-bench kvflash-quality kvflash-plan \
  >/dev/null
bin=build/release/tools
echo "## 1. Decode speed (32 query heads / 8 KV heads, head dim 128, one query token)"
"$bin"/bench/kvflash-bench -ctk f16,q8_0,q4_0,turbo3 -d 4096,32768 -r 5 "$@"
echo
echo "## 2. Accuracy against float64 attention on the original (unquantized) K/V"
"$bin"/quality/kvflash-quality --fast
echo
echo "## 3. Memory plan: Llama-3.1-8B, 24 GiB for the KV cache"
"$bin"/plan/kvflash-plan --model llama-3.1-8b -c 32768,131072 --budget 24G
