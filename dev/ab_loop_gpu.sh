#!/usr/bin/env bash
# A/B of kvflash-loop on one GPU, in one run: A is this working tree, B1, B2, ... the same tree
# with each PATCH applied (-R before a patch: reverse-applied, so that the patch is the change
# under test and B the tree without it). Builds every tree in parallel (A also
# test_gpu_attention, run once), then runs the kvflash-loop binaries in turns, ROUNDS times each:
#   dev/ab_loop_gpu.sh OUTDIR ROUNDS [-R] PATCH [[-R] PATCH ...] -- kvflash-loop flags...
# e.g. the code of an older commit as one variant: `git diff OLD HEAD -- src include tools tests
# CMakeLists.txt > old.patch`, then `-R old.patch`.
set -uo pipefail
out=$1; rounds=$2; shift 2
patches=(); revs=(); dirs=("$PWD")
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  rev=""; [ "$1" = -R ] && { rev=-R; shift; }
  revs+=("$rev"); patches+=("$(realpath "$1")"); shift
done
[ "${1:-}" = -- ] && shift
[ ${#patches[@]} -gt 0 ] ||
  { echo "usage: $0 OUTDIR ROUNDS [-R] PATCH ... -- loop flags" >&2; exit 2; }
mkdir -p "$out"; out=$(realpath "$out")
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
# shellcheck source=dev/ab_trees.sh
source dev/ab_trees.sh
n_trees=$((${#patches[@]} + 1))
jobs=$(( $(nproc) / n_trees > 0 ? $(nproc) / n_trees : 1 ))
tags=(a); builds=("$PWD/build/ab-a")
for i in "${!patches[@]}"; do
  tag=b$((i + 1)); dir=/tmp/ab-$tag
  rev=${revs[$i]}; p=${patches[$i]}
  ab_copy_tree "$dir" "$p" "$out/patch_$tag.txt" $rev || exit 1
  echo "$tag: $rev $(basename "$p")" | tee -a "$out/variants.txt"
  tags+=("$tag"); dirs+=("$dir"); builds+=("$dir/build/ab-$tag")
done
b() {  # src, build dir, tag, targets
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DKVFLASH_CUDA_ALL_PAIRS=ON "${prefix_args[@]}" > "$out/cfg_$3.txt" 2>&1 &&
    cmake --build "$2" -j "$jobs" --target $4 > "$out/build_$3.txt" 2>&1
}
pids=()
for i in "${!tags[@]}"; do
  targets=kvflash-loop; [ "$i" = 0 ] && targets="kvflash-loop test_gpu_attention"
  b "${dirs[$i]}" "${builds[$i]}" "${tags[$i]}" "$targets" & pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" ||
    { echo "build ${tags[$i]} failed"; tail -20 "$out/build_${tags[$i]}.txt"; exit 1; }
done
timeout 150 "${builds[0]}/tests/test_gpu_attention" > "$out/tests_a.txt" 2>&1
tail -3 "$out/tests_a.txt"
for r in $(seq "$rounds"); do
  for i in "${!tags[@]}"; do
    v=${tags[$i]}
    timeout 120 "${builds[$i]}/tools/loop/kvflash-loop" "$@" > "$out/loop_${v}_$r.md" 2>&1
    echo "== $v round $r"; grep -E "^\| +[0-9]" "$out/loop_${v}_$r.md"
  done
done
