#!/usr/bin/env bash
# A kvflash-bench variant in a minute instead of a full build: some decode instance files of a
# built tree recompiled with extra nvcc flags (an experiment's -D macro), put into a copy of its
# libkvflash.a, and kvflash-bench relinked with it; the binary xz-compressed to OUT_XZ for a GPU
# A/B (dev/ab_bins_gpu.sh reads DIR/NAME.bench.xz). BUILD must be a CUDA build with static tools
# (-DKVFLASH_BUILD_SHARED=OFF) whose kvflash-bench is built; the sources are this tree's, so the
# macro's code must be in the working tree (behind #ifdef, never committed) while this runs.
#   dev/variant_bench.sh build/new build/carry/nomask.bench.xz "-DKVFLASH_EXP_X" q4_0_q4_0 turbo3_turbo3
# PAIR names a file instances/default_pairs/decode_PAIR.cu. Every other instance and the host code
# stay as BUILD has them. Two files at a time (the machine's cores); ~20 s per file.
set -eu
build=$(realpath "${1:?usage: dev/variant_bench.sh BUILD OUT_XZ \"NVCC FLAGS\" PAIR...}")
out=$(realpath -m "${2:?out}")
flags=${3?flags}
shift 3
[ $# -gt 0 ] || { echo "name at least one PAIR" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
cuda=$build/src/backends/cuda
[ -f "$build/src/libkvflash.a" ] && [ -f "$build/tools/bench/CMakeFiles/kvflash-bench.dir/link.txt" ] ||
  { echo "$build: no static libkvflash.a or kvflash-bench link line (build it first)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$build/src/libkvflash.a" "$tmp/"
# The build's own CUDA flags (flags.make), the spill warnings of the instance files included.
get() { sed -n "s/^$1 = //p" "$cuda/CMakeFiles/kvflash_cuda.dir/flags.make"; }
read -r -a defines <<< "$(get CUDA_DEFINES)"
read -r -a cflags <<< "$(get CUDA_FLAGS)"
read -r -a extra <<< "$flags"
nvcc=$(sed -n 's/^# compile CUDA with //p' "$cuda/CMakeFiles/kvflash_cuda.dir/flags.make")
pids=()
for pair in "$@"; do
  src=$root/src/backends/cuda/decode/instances/default_pairs/decode_$pair.cu
  [ -f "$src" ] || { echo "no $src" >&2; exit 1; }
  (cd "$cuda" && "$nvcc" -forward-unknown-to-host-compiler "${defines[@]}" "${extra[@]}" \
     --options-file CMakeFiles/kvflash_cuda.dir/includes_CUDA.rsp "${cflags[@]}" \
     -Xptxas=-warn-spills -c "$src" -o "$tmp/decode_$pair.cu.o") &
  pids+=($!)
  if [ ${#pids[@]} -ge "$(nproc)" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
(cd "$tmp" && ar r libkvflash.a decode_*.cu.o)
# kvflash-bench's link line with the archive replaced by the copy.
link=$(sed "s# ../../src/libkvflash.a # $tmp/libkvflash.a #; s# -o kvflash-bench # -o $tmp/kvflash-bench #" \
  "$build/tools/bench/CMakeFiles/kvflash-bench.dir/link.txt")
(cd "$build/tools/bench" && eval "$link")
mkdir -p "$(dirname "$out")"
xz -T0 -6 -c "$tmp/kvflash-bench" > "$out"
echo "$out: kvflash-bench of $build with $* recompiled ($flags)"
