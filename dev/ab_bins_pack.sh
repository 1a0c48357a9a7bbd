#!/usr/bin/env bash
# Packs prebuilt binaries for dev/ab_bins_gpu.sh into DIR (under build/, ignored: carry it):
# NAME.bench.xz from each NAME=BUILD (BUILD/tools/bench/kvflash-bench), and the candidate's
# (the last pair's) test_gpu_attention and kvflash-parity.
#   dev/ab_bins_pack.sh build/carry base=/tmp/base/build new=build/ab-new
set -eu
dir=${1:?usage: dev/ab_bins_pack.sh DIR NAME=BUILD ...}
shift
mkdir -p "$dir"
for pair in "$@"; do
  xz -T0 -6 -c "${pair#*=}/tools/bench/kvflash-bench" > "$dir/${pair%%=*}.bench.xz"
done
last=${*: -1}
xz -T0 -6 -c "${last#*=}/tests/test_gpu_attention" > "$dir/test_gpu_attention.xz"
xz -T0 -6 -c "${last#*=}/tools/parity/kvflash-parity" > "$dir/kvflash-parity.xz"
du -sh "$dir"
