#!/usr/bin/env bash
# A/B of two versions of the CUDA code on one GPU, in one run: A is this working tree, B the same
# tree with a patch applied (or reverse-applied with -R). Both kvflash-bench binaries are built,
# then run in turns (ROUNDS times each, alternating) with the same flags; ab.md lists each row's
# median over the rounds of the per-run medians, A against B.
#   dev/ab_gpu.sh OUTDIR PATCH [-R] ROUNDS -- kvflash-bench flags...
set -uo pipefail
out=${1:?usage: dev/ab_gpu.sh OUTDIR PATCH [-R] ROUNDS -- BENCH FLAGS}
patch=${2:?patch file}
shift 2
reverse=()
if [ "${1:-}" = "-R" ]; then reverse=(-R); shift; fi
rounds=${1:?rounds}
shift
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"
cd "$(dirname "$0")/.."
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
# shellcheck source=dev/ab_trees.sh
source dev/ab_trees.sh
ab_build_trees "$out" "$patch" ab "${reverse[@]}" || exit 1
for r in $(seq "$rounds"); do
  "$bench_a" --backend cuda --no-progress -o csv "$@" > "$out/a_$r.csv" 2>> "$out/err.txt"
  "$bench_b" --backend cuda --no-progress -o csv "$@" > "$out/b_$r.csv" 2>> "$out/err.txt"
done
python3 - "$out" "$rounds" > "$out/ab.md" <<'PY'
import csv, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
med = {}
for side in "ab":
    for r in range(1, rounds + 1):
        for row in csv.DictReader(open(f"{out}/{side}_{r}.csv")):
            key = (f'{row["k_type"]}/{row["v_type"]}', f'{row["n_q_heads"]}/{row["n_kv_heads"]}',
                   row["head_dim_k"], row["n_q"], int(row["depth"]), row["test"])
            med.setdefault(key, {"a": [], "b": []})[side].append(float(row["us_median"]))
print("| K/V | heads | D | q | depth | test | A µs | B µs | B/A |")
print("|---|---|---|---:|---:|---|---:|---:|---:|")
for key in sorted(med, key=lambda k: (k[5], k[0], k[1], k[2], k[3], k[4])):
    a, b = statistics.median(med[key]["a"]), statistics.median(med[key]["b"])
    print(f"| {' | '.join(str(x) for x in key)} | {a:.1f} | {b:.1f} | {b / a:.3f} |")
PY
cat "$out/ab.md"
