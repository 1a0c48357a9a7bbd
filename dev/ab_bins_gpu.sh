#!/usr/bin/env bash
# One device call comparing several prebuilt kvflash-bench binaries (built on the CPU machine,
# xz-compressed into a carried folder; no build on the GPU): the GPU tests and CUDA parity of the
# candidate, memcheck and AB_RACECHECK (default 1) racecheck runs, then, if they passed, ROUNDS
# rounds in which every binary runs the same flags in turn (the order rotates each round). Writes
# OUT/checks.txt, OUT/NAME_ROUND.csv and OUT/sides.md (medians over the rounds of the per-run
# medians; ratios first/side: above 1, the side is faster than the first).
#   AB_EXTRA="FLAGS|FLAGS" dev/ab_bins_gpu.sh OUT ROUNDS DIR SIDE [SIDE ...] -- BENCH FLAGS
# A SIDE is NAME (the binary DIR/NAME.bench.xz) or NAME@VAR=VALUE (that binary with a setting in
# its environment, e.g. an experiment knob); DIR also holds test_gpu_attention.xz and
# kvflash-parity.xz of the candidate (checked with no setting); dev/ab_bins_pack.sh makes it. AB_DEADLINE (s, default 480) stops
# starting rounds after that many seconds from the start.
set -u
out=${1:?usage: dev/ab_bins_gpu.sh OUT ROUNDS DIR NAME [NAME ...] -- BENCH FLAGS}
rounds=${2:?rounds}
dir=${3:?dir}
shift 3
names=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do names+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$out"
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
# shellcheck source=dev/ab_trees.sh
source dev/ab_trees.sh
unxz_to() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2" && chmod +x "$2"; }
b=/tmp/ab-bins
mkdir -p "$b/tests" "$b/tools/parity"
for n in "${names[@]}"; do
  bin=${n%%@*}
  [ -x "$b/$bin" ] || unxz_to "$dir/$bin.bench.xz" "$b/$bin" || { echo "no $dir/$bin.bench.xz"; exit 1; }
done
unxz_to "$dir/test_gpu_attention.xz" "$b/tests/test_gpu_attention" &&
  unxz_to "$dir/kvflash-parity.xz" "$b/tools/parity/kvflash-parity" || exit 1
ab_gpu_checks "$out" "$b" "" 1 "${AB_RACECHECK:-1}" || { echo "tests or parity failed: no bench"; exit 2; }
side_file() { echo "$1" | tr -c 'A-Za-z0-9_.\n-' '-'; }  # a side's CSV name
extra=()
[ -n "${AB_EXTRA:-}" ] && IFS='|' read -r -a extra <<< "$AB_EXTRA"
side_run() {  # SIDE ROUND FLAGS...
  local n=$1 r=$2 x bin=${1%%@*} e=()
  shift 2
  [[ $n == *@* ]] && e=("${n#*@}")
  local f="$out/$(side_file "$n")_$r.csv"
  env "${e[@]}" "$b/$bin" --backend cuda --no-progress -o csv "$@" > "$f" 2>> "$out/bench.err"
  for x in "${extra[@]}"; do
    # shellcheck disable=SC2086  # a flag set, split on purpose
    env "${e[@]}" "$b/$bin" --backend cuda --no-progress -o csv $x 2>> "$out/bench.err" | tail -n +2 >> "$f"
  done
}
done_rounds=0
for r in $(seq "$rounds"); do
  [ "$SECONDS" -gt "${AB_DEADLINE:-480}" ] && break
  k=$(( (r - 1) % ${#names[@]} ))
  for i in "${!names[@]}"; do
    side_run "${names[$(( (i + k) % ${#names[@]} ))]}" "$r" "$@"
  done
  done_rounds=$r
done
files=()
for n in "${names[@]}"; do files+=("$(side_file "$n")"); done
python3 - "$out" "$done_rounds" "${#names[@]}" "${names[@]}" "${files[@]}" > "$out/sides.md" <<'PY'
import csv, statistics, sys
out, rounds, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names, files = sys.argv[4:4 + k], sys.argv[4 + k:]
med = {}
for n, fn in zip(names, files):
    for r in range(1, rounds + 1):
        for row in csv.DictReader(open(f"{out}/{fn}_{r}.csv")):
            key = (f'{row["k_type"]}/{row["v_type"]}', f'{row["n_q_heads"]}/{row["n_kv_heads"]}',
                   row["head_dim_k"], row["test"], int(row["depth"]))
            med.setdefault(key, {s: [] for s in names})[n].append(float(row["us_median"]))
print(f"{rounds} rounds; µs, medians of the rounds; ({names[0]} / side)\n")
print("| K/V | heads | D | call | depth | " + " | ".join(names) + " |")
print("|---|---|---|---:|---:|" + "---:|" * len(names))
for key in sorted(med):
    base = statistics.median(med[key][names[0]])
    cells = [f"{base:.1f}"]
    for n in names[1:]:
        a = statistics.median(med[key][n])
        cells.append(f"{a:.1f} ({base / a:.3f})")
    print(f"| {' | '.join(str(x) for x in key)} | " + " | ".join(cells) + " |")
PY
cat "$out/sides.md"
