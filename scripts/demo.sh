#!/usr/bin/env bash
# The README's first command: build kvflash (Release) and show what it is for on an embedded
# default: decode speed of the CPU backend over f16, q8_0, q4_0 and turbo3 KV at a few depths,
# and a parity check of every type against the float64 reference. Under a minute on 2 cores
# once built.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target kvflash-bench-cpu kvflash-parity >/dev/null
bin=build/release/tools
echo "## Decode speed, CPU backend, 32 query heads / 8 KV heads, head dim 128, 1 query token"
"$bin"/bench/kvflash-bench-cpu --types f16,q8_0,q4_0,turbo3 -d 4096,32768 -r 5 "$@"
echo
echo "## Accuracy against the float64 reference (same quantized K/V), every type, decode"
"$bin"/parity/kvflash-parity --mode test --filter '^q1_h8x2_d128_k-' | tail -n 20
