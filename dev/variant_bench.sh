#!/usr/bin/env bash
# A kvflash-bench variant in a minute instead of a full build: some instance files of a built tree
# recompiled with extra nvcc flags (an experiment's -D macro) or from another source tree
# (VARIANT_ROOT: e.g. a git worktree of the commit to compare against), put into a copy of its
# libkvflash.a, and kvflash-bench relinked with it; the binary xz-compressed to OUT_XZ for a GPU
# A/B (dev/ab_bins_gpu.sh reads DIR/NAME.bench.xz). BUILD must be a CUDA build with static tools
# (-DKVFLASH_BUILD_SHARED=OFF) whose kvflash-bench is built; the sources are this tree's, so the
# macro's code must be in the working tree (behind #ifdef, never committed) while this runs.
#   dev/variant_bench.sh build/new build/carry/nomask.bench.xz "-DKVFLASH_EXP_X" q4_0_q4_0 turbo3_turbo3
#   VARIANT_ROOT=/tmp/base dev/variant_bench.sh build/new build/carry/base.bench.xz "" prefill_q8_0_q8_0
# PAIR names a file instances/default_pairs/decode_PAIR.cu, or prefill_PAIR: the prefill
# instance file, or a host source (a path ending in .cpp under src/, e.g.
# src/backends/cuda/prefill/prefill_plan.cpp: compiled with its target's flags). Every other instance and the host code stay as BUILD has them (so a variant
# from another tree is only meaningful where the two trees' host code and parameters agree).
# Two files at a time (the machine's cores); ~20 s per decode file, ~60 s per prefill file.
# VARIANT_TARGET=tests/test_gpu_attention relinks that binary of BUILD instead (a candidate's
# GPU tests, for dev/prefill_ab_gpu.sh's DIR/test_gpu_attention.xz); several targets (space
# separated) from one recompile need a % in OUT_XZ, replaced by each target's name.
set -eu
build=$(realpath "${1:?usage: dev/variant_bench.sh BUILD OUT_XZ \"NVCC FLAGS\" PAIR...}")
out=$(realpath -m "${2:?out}")
flags=${3?flags}
shift 3
[ $# -gt 0 ] || { echo "name at least one PAIR" >&2; exit 2; }
root=$(cd "${VARIANT_ROOT:-$(dirname "$0")/..}" && pwd)
cuda=$build/src/backends/cuda
read -r -a targets <<< "${VARIANT_TARGET:-tools/bench/kvflash-bench}"
[ ${#targets[@]} -eq 1 ] || [[ $out == *%* ]] || { echo "several targets: put a % in OUT_XZ" >&2; exit 2; }
for target in "${targets[@]}"; do
  if [ ! -f "$build/src/libkvflash.a" ] ||
     [ ! -f "$build/$(dirname "$target")/CMakeFiles/$(basename "$target").dir/link.txt" ]; then
    echo "$build: no static libkvflash.a or $target link line (build it first)" >&2
    exit 1
  fi
done
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
  if [[ $pair == *.cpp ]]; then  # a host source, with the flags of the target that built it
    obj=$(find "$build/src" -name "$(basename "$pair").o" | head -1)
    [ -n "$obj" ] || { echo "no object of $pair in $build" >&2; exit 1; }
    fm=${obj%%.dir/*}.dir/flags.make
    hget() { sed -n "s/^$1 = //p" "$fm"; }
    read -r -a hdef <<< "$(hget CXX_DEFINES)"
    read -r -a hinc <<< "$(hget CXX_INCLUDES)"
    read -r -a hfl <<< "$(hget CXX_FLAGS)"
    c++ "${hdef[@]}" -I"$root/src" -I"$root/include" "${hinc[@]}" "${hfl[@]}" -c "$root/$pair" \
      -o "$tmp/$(basename "$pair").o" &
    pids+=($!)
    continue
  fi
  family=decode
  [[ $pair == prefill_* || $pair == decode_* ]] && family=${pair%%_*} && pair=${pair#*_}
  src=$root/src/backends/cuda/$family/instances/default_pairs/${family}_$pair.cu
  [ -f "$src" ] || { echo "no $src" >&2; exit 1; }
  # (the source tree's headers first)
  (cd "$cuda" && "$nvcc" -forward-unknown-to-host-compiler "${defines[@]}" "${extra[@]}" \
     -I"$root/src" -I"$root/include" \
     --options-file CMakeFiles/kvflash_cuda.dir/includes_CUDA.rsp "${cflags[@]}" \
     -Xptxas=-warn-spills -c "$src" -o "$tmp/${family}_$pair.cu.o") &
  pids+=($!)
  if [ ${#pids[@]} -ge "$(nproc)" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
(cd "$tmp" && ar r libkvflash.a ./*.o)
# Each target's link line with the archive replaced by the copy.
for target in "${targets[@]}"; do
  tdir=$build/$(dirname "$target") tname=$(basename "$target") o=${out//%/$(basename "$target")}
  link=$(sed -E "s# (\.\./)+src/libkvflash\.a # $tmp/libkvflash.a #; s# -o $tname # -o $tmp/$tname #" \
    "$tdir/CMakeFiles/$tname.dir/link.txt")
  (cd "$tdir" && eval "$link")
  mkdir -p "$(dirname "$o")"
  xz -T0 -6 -c "$tmp/$tname" > "$o"
  echo "$o: $tname of $build with $* recompiled ($flags)"
done
