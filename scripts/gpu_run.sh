#!/usr/bin/env bash
# On a GPU machine (Hopper, sm_90): build kvflash with its CUDA backend, run every test (GPU tests
# carry the CTest label "gpu"; each also runs under compute-sanitizer memcheck and racecheck), run
# the benchmarks, and write everything into the folder named as the first argument:
#   env.txt      GPU, driver, compilers
#   build.txt    the build log
#   ctest.txt    the GPU tests (label gpu; KVFLASH_GPU_RUN_ALL_TESTS=1 runs every test)
#   sanitizer.txt compute-sanitizer over the GPU tests
#   bench_cuda.csv (+ .err)  kvflash-bench CUDA decode: every type at 4K..1M, the mixed pairs,
#                GQA 8, head dim 256, 8 query tokens
#   bench_serving.csv (+ .err)  serving batches (issue 43): 64 sequences of 1K-32K tokens and 256
#                of 1K-4K, one query each, every type, contiguous and paged 16
#   loop_bars.csv (+ .err)  kvflash-loop per KV type (32 layers, one graph per step) at 4K/32K/256K
#   bars.md      issue 43's bars, each point with its measured value and PASS/FAIL
#                (scripts/bars.py); also printed
#   bench_cuda_sweep.csv (+ .err)  f16 and q4_0 over every power of two 1K..1M and close pairs
#   bench_paged.csv (+ .err), paged.md  paged caches (page sizes 1..256, shuffled tables) against
#                contiguous ones, µs per call
#   profile.txt, sass.txt  with KVFLASH_GPU_PROFILE=1: Nsight Compute sections and SASS of the
#                decode kernel (f16, q4_0 at 1M tokens); q4_0_1M.ncu-rep and q4_0_1M_sass.csv:
#                the full report and its per-SASS-instruction source page for q4_0 at 1M
#   (KVFLASH_GPU_QUICK=1: no tests, no sanitizer, no SDPA, a small benchmark: for tuning runs)
#   summary.md   both as tables: % of read bandwidth, straight-line fit and steps (also printed)
#   loop.md      kvflash-loop: a 32-layer model's attention per decode step, eager and as one CUDA
#                graph (time per token, graph overhead, memory against kvflash-plan); then per
#                2048-token prefill chunk through gpu::KvCache (tokens/s per KV type against f16)
#   bench_sdpa.csv (+ .err)  the fair peer: PyTorch scaled_dot_product_attention (cuDNN and flash
#                backends, f16/bf16) on the same GPU, 32/8 heads, D 128, depths 4K/32K/128K/1M, 1
#                and 8 query tokens (scripts/bench_sdpa.py); needs python3 with torch, else .err
#                says it was skipped
#                and, where the build made the Python package, kvflash through it on the same
#                tensors (bench_sdpa.py --kvflash; python_overhead.txt: the package's cost per call)
#   compare_sdpa.md  kvflash vs SDPA, one table per shape (scripts/compare_sdpa.py); also printed
#                at the end of stdout
#   bench_prefill.csv (+ .err)  kvflash-bench CUDA prefill (cuda.prefill): fresh prompts of 8K and
#                32K tokens, chunks of 2048 queries onto 8K/32K/128K caches, 32/8 heads, head dims
#                64/128/256, f16, bf16, q8_0, q4_0, turbo2/3/4, fp8 and q8_0/turbo4; TFLOP/s of the
#                visible (query, key) pairs
#   bench_sdpa_prefill.csv (+ .err)  SDPA (cuDNN, flash, efficient; f16, bf16) on the same shapes
#                (scripts/bench_sdpa.py --prefill)
#   prefill.md   each KV type's prefill TFLOP/s against f16, and kvflash f16 against the fastest
#                SDPA (scripts/compare_prefill.py); also printed
# The Debian -dev packages kvflash builds with come from .debs/ where the machine lacks them
# (scripts/gpu_deps.sh).
set -uo pipefail
out=${1:?usage: scripts/gpu_run.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
jobs=$(nproc)

# shellcheck source=scripts/gpu_deps.sh
if ! source scripts/gpu_deps.sh 2> "$out/env.txt"; then cat "$out/env.txt"; exit 1; fi

{
  nvidia-smi; nvcc --version; cmake --version | head -1; g++ --version | head -1
  echo "dependencies: ${prefix_args[*]:-system}"
} > "$out/env.txt" 2>&1

# Every (K, V) type pair's kernels (KVFLASH_CUDA_ALL_PAIRS): the tests and the benchmark cover the
# whole matrix, as a release build ships it.
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DKVFLASH_CUDA_ALL_PAIRS=ON "${prefix_args[@]}" > "$out/build.txt" 2>&1 &&
  cmake --build build/gpu -j "$jobs" ${KVFLASH_GPU_QUICK:+--target kvflash-bench} \
    ${KVFLASH_GPU_VARIANTS:+--target kvflash-bench kvflash-parity test_gpu_attention} \
    >> "$out/build.txt" 2>&1
build_rc=$?
if [ $build_rc -ne 0 ]; then
  echo "build failed ($build_rc)"; tail -n 40 "$out/build.txt"; exit $build_rc
fi

# Optional tuning mode: KVFLASH_GPU_VARIANTS="a b c" with KVFLASH_GPU_VARIANT_ENV="NAME1 NAME2"
# runs the GPU tests and CUDA parity once, then one bench matrix per variant, variant "x,y" setting
# NAME1=x NAME2=y for the bench (variants.csv with the variant first as "x+y", variants.md). The
# environment names must be read by the code under test (add the knob for the experiment).
if [ -n "${KVFLASH_GPU_VARIANTS:-}" ]; then
  bench=build/gpu/tools/bench/kvflash-bench
  {
    build/gpu/tests/test_gpu_attention 2>&1 | tail -n 3; echo "tests rc=${PIPESTATUS[0]}"
    build/gpu/tools/parity/kvflash-parity --backend cuda 2>&1 | tail -n 2
    echo "parity rc=${PIPESTATUS[0]}"
  } > "$out/variants_check.txt" 2>&1
  read -r -a names <<< "${KVFLASH_GPU_VARIANT_ENV:-}"
  for v in $KVFLASH_GPU_VARIANTS; do
    IFS=, read -r -a vals <<< "$v"
    envs=()
    for i in "${!names[@]}"; do envs+=("${names[$i]}=${vals[$i]:-}"); done
    bench_args=("-ctk f16,q8_0,q4_0,turbo3,turbo4 -d 4096,32768,131072,1048576"
                "-ctk f16,q8_0,q4_0,turbo3 -n 8 -d 32768,131072" "-ctk q8_0 -ctv turbo4 -d 131072")
    [ -n "${KVFLASH_GPU_VARIANT_BENCH:-}" ] && bench_args=("$KVFLASH_GPU_VARIANT_BENCH")
    for args in "${bench_args[@]}"; do
      # shellcheck disable=SC2086
      env "${envs[@]}" $bench --backend cuda -r 30 --warmup 5 --no-progress -o csv $args \
        2>>"$out/variants.err" | tail -n +2 | sed "s|^|${v//,/+},|" >> "$out/variants.csv"
    done
  done
  cat "$out/variants_check.txt"
  python3 - "$out/variants.csv" <<'PY' | tee "$out/variants.md"
import csv, sys, collections
t = collections.defaultdict(dict)
variants = []
for r in csv.reader(open(sys.argv[1])):
    v = r[0]
    if v not in variants: variants.append(v)
    t[(r[4], r[5], r[12], int(r[11]))][v] = (float(r[17]), float(r[25]) if r[25] else 0.0)
print("| K | V | n | depth | " + " | ".join(f"{v}: us (%BW)" for v in variants) + " |")
print("|---|---|---:|---:|" + "---:|" * len(variants))
for key in sorted(t, key=lambda k: (k[2], k[0], k[1], k[3])):
    cells = [f"{t[key][v][0]:.1f} ({t[key][v][1]:.0f}%)" if v in t[key] else "-" for v in variants]
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | " + " | ".join(cells) + " |")
PY
  exit 0
fi

if [ -n "${KVFLASH_GPU_QUICK:-}" ]; then
  echo "KVFLASH_GPU_QUICK: tests and compute-sanitizer skipped" > "$out/ctest.txt"
  ctest_rc=0
else
# The gpu label, plus the tests that use a device without carrying it (device services, the
# bench's CUDA path).
{
  ctest --test-dir build/gpu -j "$jobs" ${KVFLASH_GPU_RUN_ALL_TESTS:+} \
    ${KVFLASH_GPU_RUN_ALL_TESTS:--L gpu} --output-on-failure
  ctest_rc=$?
  if [ -z "${KVFLASH_GPU_RUN_ALL_TESTS:-}" ]; then
    ctest --test-dir build/gpu -R 'DeviceServices|BenchCuda' --output-on-failure || ctest_rc=1
  fi
  echo "ctest_rc=$ctest_rc"
} > "$out/ctest.txt" 2>&1
ctest_rc=$(sed -n 's/^ctest_rc=//p' "$out/ctest.txt")
tail -n 5 "$out/ctest.txt"

# compute-sanitizer over every GPU test executable (label gpu), shortened cases
# (KVFLASH_GPU_TEST_QUICK=1), plus the CUDA parity cases of up to 5000 tokens under memcheck.
{
  gpu_tests=$(ctest --test-dir build/gpu -L gpu -N 2>/dev/null | grep -c "Test *#")
  echo "GPU tests: $gpu_tests"
  for exe in build/gpu/tests/test_gpu_*; do
    [ -x "$exe" ] || continue
    for tool in memcheck racecheck; do
      echo "== $tool $exe"
      KVFLASH_GPU_TEST_QUICK=1 compute-sanitizer --tool "$tool" --error-exitcode 1 "$exe"
      echo "rc=$?"
    done
  done
  echo "== memcheck kvflash-parity --backend cuda (kv <= 5000)"
  compute-sanitizer --tool memcheck --error-exitcode 1 build/gpu/tools/parity/kvflash-parity \
    --backend cuda --filter 'kv(1|2|9|31|33|63|64|65|129)(_|$)' | tail -n 3
  echo "rc=$?"
} > "$out/sanitizer.txt" 2>&1
grep -E "^== |rc=|ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer.txt"
fi

bench=build/gpu/tools/bench/kvflash-bench
common=(--backend cuda -r 30 --warmup 5 --no-progress -o csv)
if [ -n "${KVFLASH_GPU_QUICK:-}" ]; then
  $bench "${common[@]}" -ctk f16,q8_0,q4_0,turbo3 -d 4096,32768,1048576 > "$out/bench_cuda.csv" \
    2> "$out/bench_cuda.err"
  $bench "${common[@]}" -ctk f16,q4_0 -n 8 -d 32768 | tail -n +2 >> "$out/bench_cuda.csv"
  python3 scripts/summarize_bench.py "$out/bench_cuda.csv" > "$out/summary.md" 2>&1
  cat "$out/summary.md"
else
# Issue 4's table: every type at 4K/32K/128K/256K/1M (32/8, D 128, one token), then the mixed
# pairs, GQA 8, head dim 256 and 8 query tokens (issue 43's bars: 256K and 1M).
all_types=f16,bf16,q8_0,q4_0,turbo2,turbo3,turbo4,fp8_e4m3,fp8_e5m2
{
  $bench "${common[@]}" -ctk $all_types -d 4096,32768,131072,262144,1048576
  $bench "${common[@]}" -ctk q8_0 -ctv turbo4,q4_0 -d 4096,32768,131072,262144,1048576 |
    tail -n +2
  $bench "${common[@]}" -ctk f16,q8_0,q4_0,turbo3,fp8_e4m3 --heads 32/4 \
    -d 32768,131072,262144,1048576 | tail -n +2
  $bench "${common[@]}" -ctk f16,q8_0,q4_0,turbo3,fp8_e4m3 --head-dim 256 \
    -d 32768,131072,262144,1048576 | tail -n +2
  $bench "${common[@]}" -ctk f16,q8_0,q4_0,turbo3,fp8_e4m3 -n 8 -d 4096,32768,131072,1048576 |
    tail -n +2
} > "$out/bench_cuda.csv" 2> "$out/bench_cuda.err"
echo "cuda bench rc=$? $(head -c 300 "$out/bench_cuda.err")"
# Any-length sweep: every power of two 1K..1M and the odd neighbours of internal boundaries.
$bench "${common[@]}" -ctk f16,q4_0 \
  -d 1024-1048576*2,2047,2049,4863,4865,262143,262145 > "$out/bench_cuda_sweep.csv" \
  2> "$out/bench_cuda_sweep.err"
echo "cuda sweep rc=$?"
python3 scripts/summarize_bench.py "$out/bench_cuda.csv" "$out/bench_cuda_sweep.csv" \
  > "$out/summary.md" 2>&1
cat "$out/summary.md"
# Paged caches (shuffled page tables) against contiguous ones (page size 0), in the same run;
# then a server's decode steps: batches of sequences with their own lengths (issue 43).
{
  $bench "${common[@]}" -ctk $all_types --page-size 0,16,64,256 -d 4096,32768,1048576
  $bench "${common[@]}" -ctk q8_0 --page-size 0,1,7 -d 4096,32768 | tail -n +2
} > "$out/bench_paged.csv" 2> "$out/bench_paged.err"
echo "paged bench rc=$?"
python3 scripts/paged_table.py "$out/bench_paged.csv" > "$out/paged.md" 2>&1
cat "$out/paged.md"
{
  $bench "${common[@]}" -ctk $all_types --ragged serving64 --page-size 0,16
  $bench "${common[@]}" -ctk $all_types --ragged serving256 --page-size 0,16 | tail -n +2
  for s in serving64 serving256; do
    $bench "${common[@]}" -ctk q8_0 -ctv turbo4 --ragged $s --page-size 16 | tail -n +2
  done
} > "$out/bench_serving.csv" 2> "$out/bench_serving.err"
echo "serving bench rc=$?"
# Issue 5's decode loop: 32 layers of 32/8 heads, D 128, up to 256K tokens, eager and graphs;
# then mixed types per layer.
loop=build/gpu/tools/loop/kvflash-loop
{
  $loop -ctk q8_0 -ctv q8_0 -d 4096,32768,131072,262144 -n 20
  echo; $loop -ctk f16 -ctv f16 -d 4096,262144 -n 10
  echo; $loop -ctk q4_0 -ctv q4_0 -d 4096,262144 -n 10
  echo; $loop --layers 4 -ctk f16,q8_0,q4_0,turbo3 -ctv q8_0,q4_0,turbo4,f16 -d 4096,65536 -n 10
  # Issue 39 point 6: one 2048-token prefill chunk per step through gpu::KvCache, per KV type
  # against f16.
  echo; $loop --chunk 2048 -d 8192,32768 -n 5
} > "$out/loop.md" 2>&1
echo "loop rc=$?"
# Issue 43's loop bars: every type, 32 layers, one CUDA graph per step.
{
  echo "type,layers,depth,graphs,us/token,kernels us,overhead %,KV GB/s,graph kernels"
  for t in ${all_types//,/ }; do
    $loop -ctk "$t" -ctv "$t" -d 4096,32768,262144 -n 10 --graphs on -o csv | tail -n +2 |
      sed "s|^|$t,32,|"
  done
} > "$out/loop_bars.csv" 2> "$out/loop_bars.err"
grep -E "^\| *[0-9a-z]|kvflash-plan|Graph runner|fell by" "$out/loop.md"
# Prefill (n > 8 query tokens): the shapes of scripts/bench_sdpa.py --prefill (its PREFILL_POINTS
# and PREFILL_HEAD_DIMS), every type and the mixed pair; one CSV header.
prefill_common=(--backend cuda -r 10 --warmup 2 --no-progress -o csv --heads 32/8
                --head-dim "64,128,256")
{
  header=1
  for shape in "-n 8192 -d 8192" "-n 32768 -d 32768" "-n 2048 -d 8192,32768,131072"; do
    for types in "-ctk f16,bf16,q8_0,q4_0,turbo2,turbo3,turbo4,fp8_e4m3,fp8_e5m2" \
      "-ctk q8_0 -ctv turbo4"; do
      # shellcheck disable=SC2086
      $bench "${prefill_common[@]}" $shape $types | tail -n +$((header ? 1 : 2))
      header=0
    done
  done
} > "$out/bench_prefill.csv" 2> "$out/bench_prefill.err"
echo "prefill bench rc=$? $(grep -c cuda "$out/bench_prefill.csv") rows"
fi

# Optional (KVFLASH_GPU_PROFILE=1): Nsight Compute on the decode kernel at 1M tokens (f16, q4_0)
# and on both kernels of a 4K call, and the SASS of the f16/q4_0 kernels: profile.txt, sass.txt.
if [ -n "${KVFLASH_GPU_PROFILE:-}" ]; then
  for point in f16:1048576:decode_kernel:1 q4_0:1048576:decode_kernel:1 \
               f16:4096:decode:4; do
    IFS=: read -r t d k c <<< "$point"
    echo "=== $t depth $d kernels $k"
    ncu --clock-control none -k "regex:$k" -c "$c" --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section Occupancy \
      --section LaunchStats --section ComputeWorkloadAnalysis --section SourceCounters \
      $bench --backend cuda -ctk "$t" -d "$d" -r 1 --warmup 1 --no-progress 2>&1 |
      grep -v "^kvflash\|^memory\|^inputs"
  done > "$out/profile.txt" 2>&1
  # Per SASS instruction of the q4_0 kernel at 1M: executions, stall samples (source page, CSV).
  ncu --clock-control none -k regex:decode_kernel -c 1 --set full --import-source yes \
    -o "$out/q4_0_1M" -f $bench --backend cuda -ctk q4_0 -d 1048576 -r 1 --warmup 1 \
    --no-progress > "$out/q4_0_1M.log" 2>&1 &&
    ncu -i "$out/q4_0_1M.ncu-rep" --page source --csv --print-source sass \
      > "$out/q4_0_1M_sass.csv" 2>> "$out/q4_0_1M.log"
  echo "source page rc=$? ($(wc -l < "$out/q4_0_1M_sass.csv" 2>/dev/null) lines)"
  # This build's instances (KVFLASH_CUDA_ALL_PAIRS): one object per K type and row count.
  obj=build/gpu/src/backends/cuda/CMakeFiles/kvflash_cuda.dir/decode/instances/all_pairs
  # Each function whole: from its header to the next function's (the first EXIT is an early one).
  fn() { awk -v f="$1" '/Function : /{p = index($0, f) > 0} p'; }
  { for o in "$obj"/decode_k_q4_0_r*.cu.o; do
      cuobjdump -sass "$o" | fn decode_kernelILNS_6KvTypeE4ELS3_4E
    done
    for o in "$obj"/decode_k_f16_r*.cu.o; do
      cuobjdump -sass "$o" | fn decode_kernelILNS_6KvTypeE1ELS3_1E
    done
  } > "$out/sass.txt" 2>&1
  echo "profile: $(grep -c . "$out/profile.txt") lines, sass: $(grep -c . "$out/sass.txt") lines"
fi

# The fair peer (about 20 s with torch's start): PyTorch SDPA on the same shapes, then both side
# by side. A machine without torch only logs that; nothing here changes the exit code.
if [ -z "${KVFLASH_GPU_QUICK:-}" ] && python3 -c 'import torch' > /dev/null 2>&1; then
  # kvflash through its Python package beside SDPA, where the build made the package
  # (KVFLASH_PYTHON=AUTO: pybind11 and Python's headers found), and the package's cost per call.
  kvpy=()
  if PYTHONPATH=build/gpu/python python3 -c 'import kvflash' > /dev/null 2>&1; then
    kvpy=(--kvflash "f16,q8_0,q4_0,turbo3")
    PYTHONPATH=build/gpu/python python3 scripts/python_overhead.py --device cuda \
      > "$out/python_overhead.txt" 2>&1
    echo "python overhead rc=$?"; tail -n 8 "$out/python_overhead.txt"
  fi
  PYTHONPATH=build/gpu/python python3 scripts/bench_sdpa.py --heads 32/8 --head-dim 128 \
    -d 4096,32768,131072,1048576 -n 1,8 "${kvpy[@]}" \
    -o "$out/bench_sdpa.csv" 2> "$out/bench_sdpa.err"
  echo "sdpa bench rc=$? $(tail -n 1 "$out/bench_sdpa.err")"
  python3 scripts/bench_sdpa.py --prefill --heads 32/8 -r 10 --warmup 3 \
    -o "$out/bench_sdpa_prefill.csv" 2> "$out/bench_sdpa_prefill.err"
  echo "sdpa prefill bench rc=$? $(tail -n 1 "$out/bench_sdpa_prefill.err")"
else
  echo "sdpa bench skipped: python3 cannot import torch" | tee "$out/bench_sdpa.err" \
    "$out/bench_sdpa_prefill.err"
fi
python3 scripts/compare_sdpa.py "$out/bench_cuda.csv" "$out/bench_sdpa.csv" > "$out/compare_sdpa.md"
cat "$out/compare_sdpa.md"
python3 scripts/bars.py "$out" > "$out/bars.md"
cat "$out/bars.md"
if [ -z "${KVFLASH_GPU_QUICK:-}" ]; then
  python3 scripts/compare_prefill.py "$out/bench_prefill.csv" "$out/bench_sdpa_prefill.csv" \
    > "$out/prefill.md"
  cat "$out/prefill.md"
fi
exit $ctest_rc
