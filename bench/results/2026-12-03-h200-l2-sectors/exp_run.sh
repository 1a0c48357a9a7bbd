#!/usr/bin/env bash
# EXPERIMENT (one device call): does the decode kernel read the 32-byte sectors that adjacent KV
# heads' rows share twice from DRAM, and do TMA's L2 promotion or clusters of CTAs in lockstep
# change that? Needs the knobs of x-knobs.patch (beside this script) applied to the tree first.
# Variants are "PROMO:CLUSTER[:SPLITS]" (KVFLASH_X_PROMO, KVFLASH_X_CLUSTER, KVFLASH_X_SPLITS).
# Builds the tree, runs the GPU tests under the last variant, Nsight Compute's DRAM bytes of each
# variant at the X_NCU_POINTS (default q8_0 and q4_0 at 1M), then alternating bench rounds until
# X_DEADLINE seconds (default 500).
#   bench/results/2026-12-03-h200-l2-sectors/exp_run.sh OUT "256:1 0:1 256:8" ROUNDS -- FLAGS
set -u
out=${1:?out}
read -r -a vars <<< "${2:?variants}"
rounds=${3:?rounds}
shift 3
[ "${1:-}" = "--" ] && shift
cd "$(dirname "$0")/../../.." || exit 1  # the repository root
mkdir -p "$out"
source scripts/gpu_deps.sh || exit 1
cmake -S . -B build/x -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  "${prefix_args[@]}" > "$out/build.txt" 2>&1 &&
  cmake --build build/x -j "$(nproc)" --target kvflash-bench test_gpu_attention \
    >> "$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
echo "built at $SECONDS s"
bench=build/x/tools/bench/kvflash-bench
setenv() {
  IFS=: read -r pr cl sp <<< "$1"
  export KVFLASH_X_PROMO=$pr KVFLASH_X_CLUSTER=$cl KVFLASH_X_SPLITS=${sp:-0}
}
last=${vars[${#vars[@]}-1]}
setenv "$last"
timeout 150 build/x/tests/test_gpu_attention > "$out/tests.txt" 2>&1
echo "tests ($last) rc=$? $(tail -n 1 "$out/tests.txt")" | tee -a "$out/checks.txt"
for pt in ${X_NCU_POINTS:-q8_0:1048576 q4_0:1048576}; do
  IFS=: read -r t d <<< "$pt"
  for v in "${vars[@]}"; do
    setenv "$v"
    printf "%s %s %s " "$t" "$d" "$v"
    ncu --clock-control none -k regex:decode_kernel -c 1 --csv \
      --metrics dram__bytes_read.sum,gpu__time_duration.sum,lts__t_sectors_op_read.sum,lts__t_sector_hit_rate.pct \
      $bench --backend cuda -ctk "$t" -d "$d" -r 1 --warmup 1 --no-progress 2>/dev/null |
      grep -E '"(dram__|gpu__|lts__)' | awk -F'","' '{printf "%s=%s ", $(NF-2), $NF}'
    echo
  done
done | tee "$out/ncu.txt"
echo "ncu done at $SECONDS s"
done_rounds=0
for r in $(seq "$rounds"); do
  [ "$SECONDS" -gt "${X_DEADLINE:-500}" ] && break
  for i in "${!vars[@]}"; do
    setenv "${vars[$i]}"
    "$bench" --backend cuda --no-progress -o csv "$@" > "$out/v${i}_$r.csv" 2>> "$out/bench.err"
  done
  done_rounds=$r
  echo "round $r done at $SECONDS s"
done
python3 - "$out" "$done_rounds" "${vars[@]}" > "$out/variants.md" <<'PY'
import csv, statistics, sys
out, rounds, vs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = {}
for i in range(len(vs)):
    for r in range(1, rounds + 1):
        for row in csv.DictReader(open(f"{out}/v{i}_{r}.csv")):
            key = (f'{row["k_type"]}/{row["v_type"]}', f'{row["n_q_heads"]}/{row["n_kv_heads"]}',
                   row["head_dim_k"], row["n_q"], int(row["depth"]))
            med.setdefault(key, [[] for _ in vs])[i].append(float(row["us_median"]))
print(f"rounds: {rounds}; variants PROMO:CLUSTER; cells: µs (v0 / variant)")
print("| K/V | heads | D | q | depth | " + " | ".join(vs) + " |")
print("|---|---|---|---:|---:|" + "---:|" * len(vs))
for key in sorted(med):
    m = [statistics.median(x) if x else float("nan") for x in med[key]]
    print("| " + " | ".join(map(str, key)) + " | " +
          " | ".join(f"{a:.1f} ({m[0] / a:.3f})" for a in m) + " |")
PY
cat "$out/variants.md"
