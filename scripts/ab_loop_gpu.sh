#!/usr/bin/env bash
# A/B of kvflash-loop on one GPU, in one run: A is this working tree, B the same tree with PATCH
# reverse-applied (so PATCH is the change under test). Builds both (A also test_gpu_attention,
# run once), then runs the two kvflash-loop binaries in turns, ROUNDS times each:
#   scripts/ab_loop_gpu.sh OUTDIR PATCH ROUNDS kvflash-loop flags...
set -uo pipefail
out=$1; patch=$2; rounds=$3; shift 3
mkdir -p "$out"
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
rm -rf /tmp/ab-b && mkdir -p /tmp/ab-b && tar cf - --exclude=./build --exclude=./.git . | tar xf - -C /tmp/ab-b
(cd /tmp/ab-b && patch -p1 -R < "$OLDPWD/$patch") > "$out/patch.txt" 2>&1 || { echo patch failed; exit 1; }
b() { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix_args[@]}" > "$out/cfg_$3.txt" 2>&1 && cmake --build "$2" -j 8 --target $4 > "$out/build_$3.txt" 2>&1; }
b . build/ab-a a "kvflash-loop test_gpu_attention" & pa=$!
b /tmp/ab-b /tmp/ab-b/build/ab-b b kvflash-loop & pb=$!
wait $pa || { echo build A failed; tail -20 "$out/build_a.txt"; exit 1; }
wait $pb || { echo build B failed; tail -20 "$out/build_b.txt"; exit 1; }
build/ab-a/tests/test_gpu_attention > "$out/tests_a.txt" 2>&1; tail -3 "$out/tests_a.txt"
for r in $(seq "$rounds"); do
  for v in a b; do
    bin=build/ab-a/tools/loop/kvflash-loop; [ $v = b ] && bin=/tmp/ab-b/build/ab-b/tools/loop/kvflash-loop
    "$bin" "$@" > "$out/loop_${v}_$r.md" 2>&1
    echo "== $v round $r"; grep -E "^\| +[0-9]" "$out/loop_${v}_$r.md"
  done
done
