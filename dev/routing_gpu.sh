#!/usr/bin/env bash
# One bounded device call measuring the CUDA routing between cuda.decode and cuda.prefill (issue 39
# point 3), nothing built on the device: the registry's own choice over n = 1..64 query tokens at
# 4K, 32K and 128K keys (f16, q8_0; 32/8 heads, D 128), cuda.prefill forced below the crossover
# (one ragged sequence of N queries) for N = 8..32, the wide head dims (576/512 with 128/1 heads,
# 512 with 32/8) around the crossover, and serving shapes around it (page 16; 16 sequences), the
# registry's choice beside cuda.decode forced. Stops starting work LIMIT seconds (default 540) in.
#   LIMIT=540 dev/routing_gpu.sh OUT DIR/new.bench.xz      (DIR under build/, carried with .debs)
# Writes OUT/auto_DEPTH.csv, OUT/ragged.csv, OUT/wide.csv, OUT/{paged,batch}_{auto,decode}.csv
# and OUT/steps.md (time per n of the chosen kernel, and each step's ratio to the previous n).
set -u
out=${1:?usage: dev/routing_gpu.sh OUT BENCH.xz}
bench_xz=$(realpath "${2:?bench}")
limit=${LIMIT:-540}
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$out"
out=$(realpath "$out")
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
b=/tmp/routing-bench
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
  "$bench_xz" "$b" && chmod +x "$b" || exit 1
nvidia-smi --query-gpu=name --format=csv,noheader > "$out/gpu.txt"
left() { echo $((limit - SECONDS)); }
run() {  # FILE SECONDS ARGS...   (RUN_ENV: VAR=VALUE for the bench's environment)
  local f=$1 t=$2
  shift 2
  [ "$(left)" -gt "$t" ] || { echo "skipped (time): $*" >> "$out/skipped.txt"; return; }
  # shellcheck disable=SC2086  # empty, or one VAR=VALUE
  env ${RUN_ENV:-} timeout "$t" "$b" --backend cuda --no-progress -o csv -r 5 --warmup 2 "$@" \
    >> "$f" 2>> "$out/bench.err"
}
F="--heads 32/8 --head-dim 128 --ctk f16,q8_0"
# shellcheck disable=SC2086  # a flag set, split on purpose
for d in 4096 32768 131072; do run "$out/auto_$d.csv" 150 $F -n 1-64+1 -d $d; done
for d in 4096 32768 131072; do
  # shellcheck disable=SC2086
  for n in 8 12 16 20 24 28 32; do run "$out/ragged.csv" 30 $F --ragged "$n:$d"; done
done
run "$out/wide.csv" 120 --heads 128/1 --head-dim 576/512 --ctk f16,q8_0 -n 16,24,28,32,33,36,40,48,64 -d 4096,32768
run "$out/wide.csv" 90 --heads 32/8 --head-dim 512 --ctk f16 -n 16,24,32,33,40,48,64 -d 32768
for side in auto decode; do
  [ $side = decode ] && export RUN_ENV=KVFLASH_FORCE_KERNEL=cuda.decode
  # shellcheck disable=SC2086
  run "$out/paged_$side.csv" 60 $F -n 2-12+1 -d 32768,131072 --page-size 16
  # shellcheck disable=SC2086
  run "$out/batch_$side.csv" 60 $F -n 2-12+1 -d 8192 -b 16
done
unset RUN_ENV
python3 - "$out" <<'PY' | tee "$out/steps.md"
import csv, glob, os, sys, collections
out = sys.argv[1]
rows = collections.defaultdict(dict)
for f in sorted(glob.glob(os.path.join(out, "*.csv"))):
    for r in csv.DictReader(l for l in open(f) if not l.startswith("#")):
        if r.get("backend") != "cuda":
            continue
        key = (os.path.basename(f)[:-4], r["k_type"], r["head_dim_k"], r["n_q_heads"], r["depth"],
               "b" + r["batch"])
        rows[key][int(r["n_q"])] = (float(r["us_median"]), r["kernel"])
for key in sorted(rows):
    print(f"### {' '.join(key)}")
    print("| n | kernel | us | step |")
    prev = None
    for n in sorted(rows[key]):
        us, k = rows[key][n]
        step = f"{us / prev:.2f}" if prev else "-"
        print(f"| {n} | {k} | {us:.1f} | {step} |")
        prev = us
PY
