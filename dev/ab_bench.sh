#!/usr/bin/env bash
# A/B timing of two kvflash-bench binaries on a noisy machine: runs them alternately ROUNDS times
# (A first, then B first, ...) with the same arguments and prints, per (K, V, depth), each side's
# median of the per-run medians and the ratio B / A of times. Alternating cancels slow drifts of the machine
# (shared hosts change speed by tens of percent within minutes).
# usage: dev/ab_bench.sh A_BIN B_BIN ROUNDS [kvflash-bench arguments...]
set -euo pipefail
if [[ $# -lt 3 ]]; then
  sed -n '2,7p' "$0"
  exit 2
fi
a=$1 b=$2 rounds=$3
shift 3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Which binary goes first alternates by round (A B, B A, ...): on this host the first of two
# back-to-back runs was 2-6% slower in an A/A test (the same binary on both sides), a bias that a
# fixed order adds to every ratio. Use an even number of rounds.
run() { "$2" "${@:3}" -o csv --no-progress 2>/dev/null | tail -n +2 | sed "s/^/$1,/" >>"$out"; }
for ((i = 0; i < rounds; ++i)); do
  if ((i % 2 == 0)); then
    run A "$a" "$@"
    run B "$b" "$@"
  else
    run B "$b" "$@"
    run A "$a" "$@"
  fi
done
python3 - "$out" <<'PY'
import collections, csv, statistics, sys
cols = "backend,kernel,cpu_info,k_type,v_type,n_q_heads,n_kv_heads,head_dim_k,head_dim_v,batch,depth,n_q,test,threads".split(",")
t = collections.defaultdict(lambda: {"A": [], "B": []})
gb = collections.defaultdict(lambda: {"A": [], "B": []})
for r in csv.reader(open(sys.argv[1])):
    side, rest = r[0], r[1:]
    key = (rest[3], rest[4], rest[10], rest[11], rest[13])
    t[key][side].append(float(rest[16]))
    gb[key][side].append(float(rest[20]))
print(f"{'K':7} {'V':7} {'depth':>8} {'n':>2} {'thr':>3} {'A us':>9} {'B us':>9} {'B/A':>6} {'A GB/s':>7} {'B GB/s':>7}")
for key, v in t.items():
    a, b = statistics.median(v["A"]), statistics.median(v["B"])
    ga, gbb = statistics.median(gb[key]["A"]), statistics.median(gb[key]["B"])
    print(f"{key[0]:7} {key[1]:7} {key[2]:>8} {key[3]:>2} {key[4]:>3} {a:9.1f} {b:9.1f} {b / a:6.3f} {ga:7.2f} {gbb:7.2f}")
PY
