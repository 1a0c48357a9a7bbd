#!/usr/bin/env bash
# One device call: trees a (this tree), b1 (a with d80a021.patch reverse-applied: the CUDA code,
# tools and tests of d80a021), b2 (a with no-merge-warm.patch: the merge kernel without its
# code-warming pass), b3 (a with turbo4-symmetric.patch reverse-applied: the turbo4 lookup of
# both table halves). Builds kvflash-bench and kvflash-loop of each, then
#  1. kvflash-bench a vs b2, ROUNDS alternating rounds (bench_{a,b2}_N.csv);
#  1b. kvflash-bench a vs b3 over turbo4 V (bench3_{a,b3}_N.csv);
#  2. kvflash-loop of a and b1 at 256K with nvidia-smi sampling clocks and power (smi_*.csv),
#     32 layers and 4 layers.
#   exp_run.sh OUTDIR ROUNDS   (from the repository root)
set -uo pipefail
out=$1; rounds=$2; here=$(dirname "$(realpath "$0")")
mkdir -p "$out"; out=$(realpath "$out")
source scripts/gpu_deps.sh || exit 1
jobs=4
mk() {  # tag patch revflag
  local dir=/tmp/x-$1
  rm -rf "$dir" && mkdir -p "$dir" && tar cf - --exclude=./build --exclude=./.git . | tar xf - -C "$dir"
  (cd "$dir" && patch -p1 $3 < "$here/$2") > "$out/patch_$1.txt" 2>&1 || { echo "patch $1 failed"; return 1; }
}
mk b1 d80a021.patch -R || exit 1
mk b2 no-merge-warm.patch "" || exit 1
mk b3 turbo4-symmetric.patch -R || exit 1
bld() { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix_args[@]}" > "$out/build_$3.txt" 2>&1 &&
        cmake --build "$2" -j $jobs --target kvflash-bench kvflash-loop >> "$out/build_$3.txt" 2>&1; }
bld . build/x-a a & p1=$!
bld /tmp/x-b1 /tmp/x-b1/build b1 & p2=$!
bld /tmp/x-b2 /tmp/x-b2/build b2 & p3=$!
bld /tmp/x-b3 /tmp/x-b3/build b3 & p4=$!
wait $p1 && wait $p2 && wait $p3 && wait $p4 || { echo build failed; tail -5 "$out"/build_*.txt; exit 1; }
declare -A bin=([a]=build/x-a [b1]=/tmp/x-b1/build [b2]=/tmp/x-b2/build [b3]=/tmp/x-b3/build)
echo "built $(date +%T)"
for r in $(seq "$rounds"); do
  for v in a b2; do
    timeout 100 "${bin[$v]}/tools/bench/kvflash-bench" --backend cuda --no-progress -o csv \
      -ctk q8_0,q4_0,f16,turbo3 -d 4096,32768,262144 -r 20 > "$out/bench_${v}_$r.csv" 2>> "$out/err.txt"
  done
done
for r in $(seq "$rounds"); do
  for v in a b3; do
    timeout 100 "${bin[$v]}/tools/bench/kvflash-bench" --backend cuda --no-progress -o csv \
      -ctk turbo4,q8_0 -ctv turbo4 -d 32768,262144,1048576 -r 20 > "$out/bench3_${v}_$r.csv" 2>> "$out/err.txt"
  done
done
echo "bench done $(date +%T)"
fields=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu
for f in clocks_event_reasons.active clocks_throttle_reasons.active; do
  nvidia-smi --query-gpu=$f --format=csv > /dev/null 2>&1 && { fields=$fields,$f; break; }
done
smi() { nvidia-smi --query-gpu=$fields --format=csv,noheader -lms 20 > "$1" 2>&1 & echo $!; }
for spec in "a 32" "b1 32" "a 4" "b1 4"; do
  read -r v L <<< "$spec"
  sp=$(smi "$out/smi_${v}_L$L.csv")
  timeout 120 "${bin[$v]}/tools/loop/kvflash-loop" --layers "$L" -ctk q8_0 -ctv q8_0 -d 262144 -n 60 > "$out/loop_${v}_L$L.md" 2>&1
  kill "$sp"
  echo "== loop $v layers $L"; grep -E "^\| +[0-9]" "$out/loop_${v}_L$L.md"
done
python3 - "$out" "$rounds" > "$out/ab.md" <<'PY'
import csv, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
for prefix, other, title in (("bench", "b2", "B2 (no warm pass)"), ("bench3", "b3", "B3 (both halves)")):
    med = {}
    for side in ("a", other):
        for r in range(1, rounds + 1):
            try:
                rows = list(csv.DictReader(open(f"{out}/{prefix}_{side}_{r}.csv")))
            except OSError:
                continue
            for row in rows:
                key = (f'{row["k_type"]}/{row["v_type"]}', int(row["depth"]))
                med.setdefault(key, {"a": [], other: []})[side].append(float(row["us_median"]))
    print(f"| K/V | depth | A µs | {title} µs | B/A |")
    print("|---|---:|---:|---:|---:|")
    for key in sorted(med):
        if not med[key]["a"] or not med[key][other]:
            continue
        a, b = statistics.median(med[key]["a"]), statistics.median(med[key][other])
        print(f"| {key[0]} | {key[1]} | {a:.1f} | {b:.1f} | {b / a:.3f} |")
    print()
PY
cat "$out/ab.md"
