#!/usr/bin/env bash
# One device call for run-time variants of the CUDA code (settings the code reads from the
# environment, e.g. KVFLASH_CUDA_TILE_SYNC): builds this tree (A) and HEAD (B: this tree with
# x.patch reverse-applied; make it with `git add -N NEW_FILES; git diff HEAD > x.patch`), runs the
# GPU tests and CUDA parity of A under every variant (each under a timeout), memcheck and
# AB_RACECHECK (default 1) racecheck runs over the decode and graph tests under every variant but
# the first, and, if all of that passed, ROUNDS rounds of kvflash-bench: B, then A under each
# variant, in turns. Writes OUT/checks.txt, the CSVs and OUT/variants.md (medians over the rounds
# of the per-run medians; B/A > 1: the variant is faster than HEAD).
# AB_CHECKS=first runs the sanitizers under the first variant only. AB_PREBUILT=DIR (a carried
# folder from dev/ab_prebuild.sh) takes both trees' binaries from DIR instead of building them
# here: the build is most of an A/B call's device time.
#   AB_ENVS="X=0 X=1 X=2" [AB_EXTRA="FLAGS|FLAGS"] dev/ab_env_gpu.sh OUT ROUNDS -- FLAGS...
set -u
out=${1:?usage: AB_ENVS="..." dev/ab_env_gpu.sh OUT ROUNDS -- BENCH FLAGS}
rounds=${2:?rounds}
shift 2
[ "${1:-}" = "--" ] && shift
read -r -a envs <<< "${AB_ENVS:?AB_ENVS: the variants, e.g. \"X=0 X=1\"}"
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$out"
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
# shellcheck source=dev/ab_trees.sh
source dev/ab_trees.sh
if [ -n "${AB_PREBUILT:-}" ]; then
  # Binaries built on the CPU machine (dev/ab_prebuild.sh): no build here.
  ab_unpack_prebuilt "$AB_PREBUILT" build/ab-a || exit 1
  bench_a=build/ab-a/tools/bench/kvflash-bench
  bench_b=build/ab-a/bench-b/kvflash-bench
else
  # B's kvflash-bench and A's kvflash-bench in parallel, then A's tests and parity.
  ab_build_trees "$out" x.patch ab -R || exit 1
  cmake --build build/ab-a -j "$(nproc)" --target test_gpu_attention kvflash-parity \
    > "$out/build_tests.txt" 2>&1 || { tail -30 "$out/build_tests.txt"; exit 1; }
fi
ok=1
for i in "${!envs[@]}"; do
  # The sanitizers under every variant but the first (usually HEAD's behaviour); AB_CHECKS=first:
  # under the first only (variants that differ in a number rather than in code paths).
  san=$((i > 0))
  [ "${AB_CHECKS:-all}" = first ] && san=$((i == 0))
  ab_gpu_checks "$out" build/ab-a "_$i" "$san" "${AB_RACECHECK:-1}" "${envs[$i]}" || ok=0
done
[ $ok -eq 1 ] || { echo "tests or parity failed: no bench"; exit 2; }
# One side's run: NAME ENV BIN (ENV "-" for none) with the flags after --, then with each of
# AB_EXTRA's flag sets ('|'-separated, e.g. "-ctk q4_0 --head-dim 256 -d 131072|-ctk q8_0 -ctv
# turbo4 -d 1048576"); the rows of all of them in OUT/NAME.csv.
bench_runs() {
  local name=$1 setting=$2 bin=$3
  shift 3
  local e=()
  [ "$setting" != "-" ] && e=("$setting")
  env "${e[@]}" "$bin" --backend cuda --no-progress -o csv "$@" > "$out/$name.csv" \
    2>> "$out/bench.err"
  local extra=() x
  [ -n "${AB_EXTRA:-}" ] && IFS='|' read -r -a extra <<< "$AB_EXTRA"
  for x in "${extra[@]}"; do
    # shellcheck disable=SC2086  # a flag set, split on purpose
    env "${e[@]}" "$bin" --backend cuda --no-progress -o csv $x 2>> "$out/bench.err" |
      tail -n +2 >> "$out/$name.csv"
  done
}
# Rounds stop once AB_DEADLINE seconds (default 480) have passed: the table uses those done.
done_rounds=0
for r in $(seq "$rounds"); do
  [ "$SECONDS" -gt "${AB_DEADLINE:-480}" ] && break
  bench_runs "b_$r" - "$bench_b" "$@"
  for i in "${!envs[@]}"; do
    bench_runs "a${i}_$r" "${envs[$i]}" "$bench_a" "$@"
  done
  done_rounds=$r
done
python3 - "$out" "$done_rounds" "${envs[@]}" > "$out/variants.md" <<'PY'
import csv, statistics, sys
out, rounds, envs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
sides = ["b"] + [f"a{i}" for i in range(len(envs))]
med = {}
for side in sides:
    for r in range(1, rounds + 1):
        for row in csv.DictReader(open(f"{out}/{side}_{r}.csv")):
            key = (f'{row["k_type"]}/{row["v_type"]}', f'{row["n_q_heads"]}/{row["n_kv_heads"]}',
                   row["head_dim_k"], row["n_q"], int(row["depth"]))
            med.setdefault(key, {s: [] for s in sides})[side].append(float(row["us_median"]))
print("| K/V | heads | D | q | depth | HEAD µs | " +
      " | ".join(f"{e} µs (HEAD/it)" for e in envs) + " |")
print("|---|---|---|---:|---:|---:|" + "---:|" * len(envs))
for key in sorted(med, key=lambda k: (k[0], k[1], k[2], k[3], k[4])):
    b = statistics.median(med[key]["b"])
    cells = []
    for i in range(len(envs)):
        a = statistics.median(med[key][f"a{i}"])
        cells.append(f"{a:.1f} ({b / a:.3f})")
    print(f"| {' | '.join(str(x) for x in key)} | {b:.1f} | " + " | ".join(cells) + " |")
PY
cat "$out/variants.md"
