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
# Which binary goes first alternates by round (A B, B A, ...): on this host the first of two
# back-to-back runs was 2-6% slower in an A/A test (the same binary on both sides), a bias that a
# fixed order adds to every ratio. Use an even number of rounds.
hdr=$(mktemp)
trap 'rm -f "$out" "$hdr" "$hdr.run"' EXIT
run() {  # SIDE BIN ARGS...: rows prefixed with the side; the header (by which columns are read) kept
  "$2" "${@:3}" -o csv --no-progress 2>/dev/null > "$hdr.run"
  head -n 1 "$hdr.run" > "$hdr"
  tail -n +2 "$hdr.run" | sed "s/^/$1,/" >> "$out"
}
for ((i = 0; i < rounds; ++i)); do
  if ((i % 2 == 0)); then
    run A "$a" "$@"
    run B "$b" "$@"
  else
    run B "$b" "$@"
    run A "$a" "$@"
  fi
done
python3 - "$out" "$hdr" <<'PY'
import collections, csv, statistics, sys
names = ["side"] + open(sys.argv[2]).read().strip().split(",")
t = collections.defaultdict(lambda: {"A": [], "B": []})
gb = collections.defaultdict(lambda: {"A": [], "B": []})
for r in csv.reader(open(sys.argv[1])):
    row = dict(zip(names, r))
    key = (row["k_type"], row["v_type"], row["depth"], row["n_q"], row["threads"], row["test"])
    t[key][row["side"]].append(float(row["us_median"]))
    gb[key][row["side"]].append(float(row["gbps"]))
print(f"{'K':7} {'V':7} {'depth':>8} {'n':>2} {'thr':>3} {'call':16} {'A us':>9} {'B us':>9} {'B/A':>6} {'A GB/s':>7} {'B GB/s':>7}")
for key, v in t.items():
    a, b = statistics.median(v["A"]), statistics.median(v["B"])
    ga, gbb = statistics.median(gb[key]["A"]), statistics.median(gb[key]["B"])
    print(f"{key[0]:7} {key[1]:7} {key[2]:>8} {key[3]:>2} {key[4]:>3} {key[5]:16} {a:9.1f} {b:9.1f} {b / a:6.3f} {ga:7.2f} {gbb:7.2f}")
PY
