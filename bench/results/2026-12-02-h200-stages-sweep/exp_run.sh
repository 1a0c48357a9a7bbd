#!/usr/bin/env bash
# EXPERIMENT (kept with its results, run from the repository root of the patched tree): stage-count sweep of the decode layout (KVFLASH_EXP_STAGES) with the
# wide kernel on and off (KVFLASH_EXP_NO_WIDE), in one build; results in $1.
set -u
out=$1; mkdir -p "$out"
source scripts/gpu_deps.sh || exit 1
cmake -S . -B build/exp -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  "${prefix_args[@]}" > "$out/cfg.txt" 2>&1
cmake --build build/exp -j "$(nproc)" --target kvflash-bench test_gpu_attention > "$out/build.txt" 2>&1 ||
  { tail -30 "$out/build.txt"; exit 1; }
for st in 3 5; do
  KVFLASH_EXP_STAGES=$st timeout 120 build/exp/tests/test_gpu_attention --gtest_filter='Cases/CudaDecode.*:CudaGraph.*' > "$out/tests_s$st.txt" 2>&1
  echo "tests stages $st rc=$?"; tail -n 2 "$out/tests_s$st.txt"
done
B=build/exp/tools/bench/kvflash-bench
for round in 1 2; do
  for nw in 0 1; do
    for st in 2 3 4 5; do
      KVFLASH_EXP_NO_WIDE=$nw KVFLASH_EXP_STAGES=$st timeout 100 $B --backend cuda --no-progress -o csv \
        -ctk f16,q8_0,q4_0,turbo3 -n 1,8 -d 32768,1048576 -r 10 > "$out/r${round}_w${nw}_s${st}.csv" 2>> "$out/err.txt"
      echo "round $round nowide $nw stages $st rc=$?"
    done
  done
done
python3 - "$out" > "$out/table.md" <<'PY'
import csv, glob, statistics, sys, os, collections
out = sys.argv[1]
d = collections.defaultdict(list)
for f in glob.glob(f"{out}/r*_w*_s*.csv"):
    _, w, s = os.path.basename(f)[:-4].split("_")
    for row in csv.DictReader(open(f)):
        d[(row["k_type"], row["n_q"], int(row["depth"]), w, s)].append(float(row["us_median"]))
keys = sorted({k[:3] for k in d})
cols = [(w, s) for w in ("w0", "w1") for s in ("s2", "s3", "s4", "s5")]
print("| K=V | q | depth | " + " | ".join(f"{w} {s}" for w, s in cols) + " |")
print("|---|---:|---:|" + "---:|" * len(cols))
for k in keys:
    vals = [statistics.median(d[k + c]) if d.get(k + c) else float("nan") for c in cols]
    print(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
PY
cat "$out/table.md"
