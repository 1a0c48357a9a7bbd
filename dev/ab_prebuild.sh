#!/usr/bin/env bash
# Builds both trees of an A/B on this (CPU) machine and packs the binaries a GPU A/B call needs
# into DIR (under the repository, ignored: carry it), so the device call skips its build
# (dev/ab_env_gpu.sh with AB_PREBUILT=DIR): A = this tree (kvflash-bench,
# test_gpu_attention, kvflash-parity), B = this tree with x.patch reverse-applied (kvflash-bench).
# About 11 minutes on 2 cores from scratch (7 with A built already); 40 MB of xz.
#   git diff HEAD -- src include tools tests CMakeLists.txt > x.patch
#   dev/ab_prebuild.sh build/carry
set -u
dir=${1:?usage: dev/ab_prebuild.sh DIR}
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=dev/ab_trees.sh
source dev/ab_trees.sh
mkdir -p "$dir"
ab_copy_tree /tmp/prebuild-b x.patch "$dir/patch.txt" -R || exit 1
build() {  # source, build dir, targets...
  local src=$1 b=$2 log
  shift 2
  log=$dir/build_$(basename "$b").txt
  if ! cmake -S "$src" -B "$b" -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON \
    -DKVFLASH_CUDA_ALL_PAIRS=ON -DCMAKE_CUDA_ARCHITECTURES=90a > "$log" 2>&1 ||
    ! cmake --build "$b" -j "$(nproc)" --target "$@" >> "$log" 2>&1; then
    echo "build $b failed"
    tail -20 "$log"
    exit 1
  fi
}
build . build/ab-a kvflash-bench test_gpu_attention kvflash-parity
build /tmp/prebuild-b /tmp/prebuild-b/build/ab-b kvflash-bench
xz -T0 -6 -c build/ab-a/tools/bench/kvflash-bench > "$dir/kvflash-bench.xz" &&
  xz -T0 -6 -c /tmp/prebuild-b/build/ab-b/tools/bench/kvflash-bench > "$dir/kvflash-bench-b.xz" &&
  xz -T0 -6 -c build/ab-a/tests/test_gpu_attention > "$dir/test_gpu_attention.xz" &&
  xz -T0 -6 -c build/ab-a/tools/parity/kvflash-parity > "$dir/kvflash-parity.xz" || exit 1
du -sh "$dir"
