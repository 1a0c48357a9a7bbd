#!/usr/bin/env bash
# The cuda.prefill bring-up run on a GPU machine: build (default type pairs unless
# KVFLASH_ALL_PAIRS=1), the CUDA parity cases (prefill ones included), the GPU tests, memcheck and
# racecheck on a prefill subset, then prefill speed: kvflash-bench on square causal prompts and
# chunks for each KV type, and PyTorch SDPA (cuDNN, flash) on the same square shapes.
#   dev/prefill_gpu.sh OUT_DIR
set -uo pipefail
out=${1:?usage: dev/prefill_gpu.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
jobs=$(nproc)
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh 2> "$out/env.txt" || { cat "$out/env.txt"; exit 1; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv >> "$out/env.txt" 2>&1
all=OFF
[ "${KVFLASH_ALL_PAIRS:-0}" = 1 ] && all=ON
t0=$(date +%s)
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DKVFLASH_CUDA_ALL_PAIRS=$all "${prefix_args[@]}" > "$out/build.txt" 2>&1 &&
  cmake --build build/gpu -j "$jobs" --target kvflash-bench kvflash-parity test_gpu_attention \
    >> "$out/build.txt" 2>&1
rc=$?
echo "build rc=$rc in $(( $(date +%s) - t0 )) s" | tee -a "$out/summary.txt"
grep -E "spill|error" "$out/build.txt" | sort | uniq -c | head -20 >> "$out/summary.txt"
[ $rc -eq 0 ] || { tail -40 "$out/build.txt"; exit 1; }
bench=build/gpu/tools/bench/kvflash-bench
parity=build/gpu/tools/parity/kvflash-parity

echo "== parity --backend cuda" | tee -a "$out/summary.txt"
timeout 200 $parity --backend cuda ${KVFLASH_PARITY_FILTER:-} --csv "$out/parity.csv" > "$out/parity.txt" 2>&1
echo "parity rc=$?" | tee -a "$out/summary.txt"
tail -n 3 "$out/parity.txt" >> "$out/summary.txt"
grep -E "FAIL|fail|error" "$out/parity.txt" | head -40 >> "$out/summary.txt"

echo "== prefill speed" | tee -a "$out/summary.txt"
for d in 8192 32768; do
  timeout 240 $bench --backend cuda --no-progress -o csv -r 5 --warmup 2 --heads 32/8 \
    --head-dim 128 -d $d -n $d --ctk f16,bf16,q8_0,q4_0,turbo3 >> "$out/bench_square.csv" \
    2>> "$out/bench.err"
done
for hd in 64 256; do
  timeout 120 $bench --backend cuda --no-progress -o csv -r 5 --warmup 2 --heads 32/8 \
    --head-dim $hd -d 8192 -n 8192 --ctk f16,q8_0 >> "$out/bench_square.csv" 2>> "$out/bench.err"
done
timeout 240 $bench --backend cuda --no-progress -o csv -r 5 --warmup 2 --heads 32/8 \
  --head-dim 128 -d 8192,32768,131072 -n 2048 --ctk f16,q8_0,q4_0,turbo3 \
  > "$out/bench_chunk.csv" 2>> "$out/bench.err"
timeout 120 $bench --backend cuda --no-progress -o csv -r 5 --warmup 2 --heads 32/8 \
  --head-dim 128 -d 32768 -n 2048 --ctk q8_0 --ctv turbo4 >> "$out/bench_chunk.csv" \
  2>> "$out/bench.err"
python3 - "$out" >> "$out/summary.txt" 2>&1 <<'EOF'
import csv, sys
out = sys.argv[1]
for name in ("bench_square.csv", "bench_chunk.csv"):
    try:
        rows = [r for r in csv.DictReader(l for l in open(f"{out}/{name}") if l.strip())
                if r.get("backend") != "backend"]
    except FileNotFoundError:
        continue
    print(f"-- {name}: kernel K/V D depth n_q us_median TFLOP/s")
    for r in rows:
        print(f"{r['kernel']} {r['k_type']}/{r['v_type']} {r['head_dim_k']} {r['depth']} "
              f"{r['n_q']} {r['us_median']} {r['tflops']}")
EOF

echo "== SDPA" | tee -a "$out/summary.txt"
timeout 300 python3 - >> "$out/summary.txt" 2>&1 <<'EOF'
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
    flops = 4 * d * 32 * n * (n + 1) / 2
    return ms, flops / ms / 1e9
for n, d in ((8192, 128), (32768, 128), (8192, 64), (8192, 256)):
    for dtype in (torch.float16, torch.bfloat16):
        for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
            try:
                ms, tf = run(n, d, dtype, be)
                print(f"sdpa {be.name} {str(dtype)[6:]} d{d} n{n}: {ms * 1e3:.1f} us {tf:.1f} TFLOP/s")
            except Exception as e:
                print(f"sdpa {be.name} {str(dtype)[6:]} d{d} n{n}: {type(e).__name__}: {str(e)[:100]}")
EOF
if [ "${KVFLASH_GPU_TESTS:-1}" = 1 ]; then
  echo "== test_gpu_attention" | tee -a "$out/summary.txt"
  timeout 300 build/gpu/tests/test_gpu_attention > "$out/gtest.txt" 2>&1
  echo "gtest rc=$?" | tee -a "$out/summary.txt"
  grep -E "^\[  (PASSED|FAILED)|FAILED|tests ran" "$out/gtest.txt" | head -30 >> "$out/summary.txt"
fi
echo "== memcheck / racecheck: parity prefill cases" | tee -a "$out/summary.txt"
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 1 $parity --backend cuda \
  -f q9_ -f q33_ > "$out/memcheck.txt" 2>&1
echo "memcheck rc=$?" | tee -a "$out/summary.txt"
grep -E "ERROR SUMMARY|Invalid" "$out/memcheck.txt" | head -5 >> "$out/summary.txt"
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 1 $parity --backend cuda \
  -f q33_h8x2_d128_k-f16 -f q33_h8x2_d128_k-q4_0 > "$out/racecheck.txt" 2>&1
echo "racecheck rc=$?" | tee -a "$out/summary.txt"
grep -E "ERROR SUMMARY|RACE" "$out/racecheck.txt" | head -5 >> "$out/summary.txt"

echo done | tee -a "$out/summary.txt"
