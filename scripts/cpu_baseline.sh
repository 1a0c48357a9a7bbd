#!/usr/bin/env bash
# The CPU baseline of the README (issue 44): decode of one sequence per KV type at 32K and 128K,
# paged caches against contiguous ones, prefill; ROUNDS rounds (default 3), each running the
# commands in the opposite order to the round before (the shared host's speed drifts within
# minutes), one CSV per round, and OUT/README.md with the min and median over the rounds, the
# share of the read bandwidth kvflash-bench measured in the same round, and issue 44's bars.
#   scripts/cpu_baseline.sh OUT [ROUNDS] [BUILD_DIR]   (BUILD_DIR: default build/release)
# Kernels as the registry chooses them; KVFLASH_FORCE_KERNEL=cpu.decode.avx2 (and so on) measures
# one instruction set (the kernel column names it).
set -euo pipefail
out=${1:?usage: scripts/cpu_baseline.sh OUT [ROUNDS] [BUILD_DIR]}
rounds=${2:-3}
build=${3:-build/release}
cd "$(dirname "$0")/.."
bench=$build/tools/bench/kvflash-bench
[ -x "$bench" ] || { echo "no $bench: build it first (cmake --preset release && cmake --build --preset release)" >&2; exit 1; }
mkdir -p "$out"
commands=(
  "--backend cpu -ctk f16,bf16,q8_0,q4_0,turbo2,turbo3,turbo4,fp8_e4m3 -d 32768,131072 -r 10"
  "--backend cpu -ctk q8_0 -ctv turbo3,turbo4 -d 32768,131072 -r 10"
  "--backend cpu -ctk f16,q8_0,q4_0,turbo3 -d 32768 --page-size 16,64,256 -r 7"
  "--backend cpu -ctk f16,q8_0,q4_0,turbo3 -n 512 -d 4096 -r 2"
)
{
  echo "# CPU baseline, $(date -u +%Y-%m-%d)"
  echo
  echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include || echo ' (with local changes)')"
  echo "- machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) hardware threads"
  echo "- commands (kvflash-bench, each round; raw CSV round_*.csv):"
  for c in "${commands[@]}"; do echo "  - \`kvflash-bench $c\`"; done
  echo
} > "$out/README.md"
for ((r = 1; r <= rounds; ++r)); do
  csv=$out/round_$r.csv
  : > "$csv"
  order=("${commands[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#commands[@]} - 1; i >= 0; --i)); do order+=("${commands[$i]}"); done
  fi
  for c in "${order[@]}"; do
    # shellcheck disable=SC2086
    "$bench" $c -o csv --no-progress > "$out/cmd.csv"
    if [ -s "$csv" ]; then tail -n +2 "$out/cmd.csv" >> "$csv"; else cat "$out/cmd.csv" > "$csv"; fi
  done
  echo "round $r of $rounds done" >&2
done
rm -f "$out/cmd.csv"
python3 scripts/summarize_cpu.py "$out"/round_*.csv >> "$out/README.md"
cat "$out/README.md"
