#!/usr/bin/env bash
# The cuda.prefill bring-up run on a GPU machine, in steps (KVFLASH_STEPS, default all of them):
#   build     build/gpu (default type pairs; KVFLASH_ALL_PAIRS=1: all), and with KVFLASH_AB_FLAGS
#             ("-DX=1") a second tree build/gpu-b with those CUDA flags (kvflash-bench only);
#             with KVFLASH_AB_SRC=DIR (a source tree carried along, e.g. `git archive REV | tar
#             -x -C build/ref`) build/gpu-b is built from that tree instead
#   tests     test_gpu_attention (every GPU test, prefill ones included)
#   parity    kvflash-parity --backend cuda: the default set's prefill cases and --set prefill
#   bench     kvflash-bench: square causal prompts (8K, 32K; head dims 64/128/256) and 2048-query
#             chunks onto 8K-128K caches, each KV type; with build/gpu-b the same rows from it
#   decode    kvflash-bench decode rows (1 and 8 tokens, 4K-128K, each type family), with
#             build/gpu-b the same rows from it: the decode kernels' A/B (2% bar)
#   sdpa      PyTorch SDPA (cuDNN, flash) on the square shapes
#   sanitize  memcheck and racecheck over parity prefill cases
# Everything lands in OUT_DIR; summary.txt has the lines to read first.
#   dev/prefill_gpu.sh OUT_DIR
set -uo pipefail
out=${1:?usage: dev/prefill_gpu.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
jobs=$(nproc)
steps=${KVFLASH_STEPS:-build tests parity bench decode sdpa sanitize}
sum="$out/summary.txt"
say() { echo "$*" | tee -a "$sum"; }
has() { [[ " $steps " == *" $1 "* ]]; }
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh 2> "$out/env.txt" || { cat "$out/env.txt"; exit 1; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv >> "$out/env.txt" 2>&1
parity=build/gpu/tools/parity/kvflash-parity
prefill_cases='^q(9|[1-9][0-9]+)_'

if has build; then
  all=OFF
  [ "${KVFLASH_ALL_PAIRS:-0}" = 1 ] && all=ON
  cfg=(-DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a
       -DKVFLASH_CUDA_ALL_PAIRS=$all "${prefix_args[@]}")
  t0=$(date +%s)
  if [ -n "${KVFLASH_AB_FLAGS:-}${KVFLASH_AB_SRC:-}" ]; then
    (cmake -S "${KVFLASH_AB_SRC:-.}" -B build/gpu-b "${cfg[@]}" \
      "-DCMAKE_CUDA_FLAGS=${KVFLASH_AB_FLAGS:-}" &&
      cmake --build build/gpu-b -j "$jobs" --target kvflash-bench) > "$out/build_b.txt" 2>&1 &
  fi
  cmake -S . -B build/gpu "${cfg[@]}" > "$out/build.txt" 2>&1 &&
    cmake --build build/gpu -j "$jobs" --target kvflash-bench kvflash-parity test_gpu_attention \
      example_decode_c \
      >> "$out/build.txt" 2>&1
  rc=$?
  wait
  say "build rc=$rc in $(( $(date +%s) - t0 )) s"
  grep -hE "spill|error" "$out"/build*.txt | sed 's/_ZN7kvflash4cuda//' | sort | uniq -c |
    head -40 >> "$sum"
  [ $rc -eq 0 ] || { tail -40 "$out/build.txt"; exit 1; }
fi

if has tests; then
  say "== test_gpu_attention"
  timeout 300 build/gpu/tests/test_gpu_attention ${KVFLASH_GTEST_FILTER:+--gtest_filter=$KVFLASH_GTEST_FILTER} \
    > "$out/gtest.txt" 2>&1
  say "gtest rc=$?"
  grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|tests ran|Failure|Expected|Which is" "$out/gtest.txt" |
    head -60 >> "$sum"
  say "== examples/decode.c (the C API on the device)"
  timeout 60 build/gpu/tests/example_decode_c >> "$sum" 2>&1
  say "example rc=$?"
fi

if has parity; then
  say "== parity --backend cuda (prefill cases of the default set, then --set prefill)"
  timeout 150 $parity --backend cuda -f "$prefill_cases" --csv "$out/parity.csv" \
    > "$out/parity.txt" 2>&1
  say "parity rc=$?"
  if [ "${KVFLASH_PARITY_QUICK:-0}" != 1 ]; then  # quick: the default set's cases only
    timeout 200 $parity --backend cuda --set prefill --csv "$out/parity_prefill.csv" \
      > "$out/parity_prefill.txt" 2>&1
    say "parity --set prefill rc=$?"
  fi
  for f in parity parity_prefill; do
    [ -f "$out/$f.txt" ] || continue
    grep -E "^FAIL" "$out/$f.txt" | head -20 >> "$sum"
    tail -n 1 "$out/$f.txt" >> "$sum"
  done
fi

compare_csv() {  # A csv, B csv (in $out): TFLOP/s per row and B/A
  python3 - "$out" "$1" "$2" >> "$sum" 2>&1 <<'EOF'
import csv, os, sys
out, name_a, name_b = sys.argv[1:4]
def rows(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return {}
    lines = [l for l in open(path) if l.strip()]
    got = {}
    for r in csv.DictReader(lines):
        if r.get("backend") == "backend":
            continue
        got[(r["k_type"], r["v_type"], r["head_dim_k"], r["depth"], r["n_q"])] = float(r["tflops"])
    return got
a, b = rows(name_a), rows(name_b)
print("K/V D depth n_q: TFLOP/s" + (" | B TFLOP/s  B/A" if b else ""))
for key, tf in a.items():
    extra = f" | {b[key]:.1f}  {b[key] / tf:.3f}" if key in b else ""
    print(f"{key[0]}/{key[1]} {key[2]} {key[3]} {key[4]}: {tf:.1f}{extra}")
EOF
}
bench_rows() {  # kvflash-bench binary, output csv
  local b=$1 csv=$2 r=(--backend cuda --no-progress -o csv -r 5 --warmup 2 --heads 32/8)
  if [ "${KVFLASH_BENCH_QUICK:-0}" = 1 ]; then  # a few rows for an A/B
    timeout 100 "$b" "${r[@]}" --head-dim 128 -d 8192 -n 8192 --ctk f16,q8_0,q4_0,turbo3 >> "$csv"
    timeout 60 "$b" "${r[@]}" --head-dim 256 -d 8192 -n 8192 --ctk f16 >> "$csv"
    timeout 60 "$b" "${r[@]}" --head-dim 128 -d 32768 -n 2048 --ctk f16,q8_0 >> "$csv"
    return
  fi
  for d in 8192 32768; do
    timeout 200 "$b" "${r[@]}" --head-dim 128 -d $d -n $d --ctk f16,bf16,q8_0,q4_0,turbo3 >> "$csv"
  done
  timeout 100 "$b" "${r[@]}" --head-dim 64,256 -d 8192 -n 8192 --ctk f16,q8_0 >> "$csv"
  timeout 200 "$b" "${r[@]}" --head-dim 128 -d 8192,32768,131072 -n 2048 \
    --ctk f16,q8_0,q4_0,turbo3 >> "$csv"
  timeout 100 "$b" "${r[@]}" --head-dim 128 -d 32768 -n 2048 --ctk q8_0 --ctv turbo4 >> "$csv"
}
if has bench; then
  say "== prefill speed"
  bench_rows build/gpu/tools/bench/kvflash-bench "$out/bench.csv" 2>> "$out/bench.err"
  [ -x build/gpu-b/tools/bench/kvflash-bench ] &&
    bench_rows build/gpu-b/tools/bench/kvflash-bench "$out/bench_b.csv" 2>> "$out/bench.err"
  compare_csv bench.csv bench_b.csv
fi

decode_rows() {  # kvflash-bench binary, output csv
  local b=$1 csv=$2 r=(--backend cuda --no-progress -o csv -r 7 --warmup 2 --heads 32/8 --head-dim 128)
  timeout 150 "$b" "${r[@]}" -d 4096,32768,131072 -n 1 --ctk f16,q8_0,q4_0,turbo3 >> "$csv"
  timeout 100 "$b" "${r[@]}" -d 32768,131072 -n 8 --ctk f16,q8_0,turbo3 >> "$csv"
  timeout 60 "$b" "${r[@]}" -d 131072 -n 1 --ctk q8_0 --ctv turbo3 >> "$csv"
}
if has decode; then
  say "== decode speed (A: this tree, B: build/gpu-b)"
  decode_rows build/gpu/tools/bench/kvflash-bench "$out/decode.csv" 2>> "$out/bench.err"
  [ -x build/gpu-b/tools/bench/kvflash-bench ] &&
    decode_rows build/gpu-b/tools/bench/kvflash-bench "$out/decode_b.csv" 2>> "$out/bench.err"
  compare_csv decode.csv decode_b.csv
fi

if has sdpa; then
  say "== SDPA"
  timeout 300 python3 - "${KVFLASH_SDPA_SHAPES:-8192:128 32768:128 8192:64 8192:256}" \
    >> "$sum" 2>&1 <<'EOF'
import sys
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F
print(torch.__version__, torch.cuda.get_device_name())
def run(n, d, dtype, backend):
    q = torch.randn(1, 32, n, d, device="cuda", dtype=dtype)
    k = torch.randn(1, 8, n, d, device="cuda", dtype=dtype)
    v = torch.randn(1, 8, n, d, device="cuda", dtype=dtype)
    with sdpa_kernel(backend):
        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        for _ in range(3): f()
        ts = []
        for _ in range(7):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); f(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort()
    ms = ts[len(ts) // 2]
    return ms, 4 * d * 32 * n * (n + 1) / 2 / ms / 1e9
for n, d in (tuple(int(x) for x in nd.split(":")) for nd in sys.argv[1].split()):
    for dtype in (torch.float16, torch.bfloat16):
        for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
            try:
                ms, tf = run(n, d, dtype, be)
                print(f"sdpa {be.name} {str(dtype)[6:]} d{d} n{n}: {ms * 1e3:.1f} us {tf:.1f} TFLOP/s")
            except Exception as e:
                print(f"sdpa {be.name} {str(dtype)[6:]} d{d} n{n}: {type(e).__name__}: {str(e)[:100]}")
EOF
fi

if has sanitize; then
  say "== memcheck / racecheck over parity prefill cases"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 $parity --backend cuda \
    -f '^q(9|33)_h8x2_d(64|128|256)_' > "$out/memcheck.txt" 2>&1
  say "memcheck rc=$?"
  tail -n 2 "$out/memcheck.txt" >> "$sum"
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 1 $parity --backend cuda \
    -f '^q33_h8x2_d128_k-(f16|q4_0|turbo3)' > "$out/racecheck.txt" 2>&1
  say "racecheck rc=$?"
  tail -n 2 "$out/racecheck.txt" >> "$sum"
fi
say done
