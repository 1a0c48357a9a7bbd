#!/usr/bin/env bash
# One bounded device call, nothing built on the device: the GPU tests of prebuilt binaries, then
# the folder that scripts/bars.py reads (issue 43's bars.md): issue 4's matrix with 256K, the
# mixed pairs, GQA 8 and head dim 256 at 256K/1M, 8 tokens, every type paged 0/16, the serving
# batches, the per-type 32-layer loop where DIR/loop.xz exists, PyTorch SDPA where torch exists.
#   mkdir DIR; xz -c build/X/tools/bench/kvflash-bench > DIR/bench.xz
#   xz -c build/X/tests/test_gpu_attention > DIR/test.xz      (optional: DIR/loop.xz, kvflash-loop;
#   the three with .debs and the tracked tree exceed the 64 MiB a device call carries)
#   LIMIT=500 dev/bars_gpu.sh OUT DIR                         (carry DIR and .debs)
# Stops starting work LIMIT seconds (default 500) after its start. Writes OUT/checks.txt,
# tests.txt, memcheck.txt, bench_*.csv, loop_bars.csv, bench_sdpa.csv, bars.md.
set -u
out=${1:?usage: dev/bars_gpu.sh OUT DIR}
dir=$(realpath "${2:?usage: dev/bars_gpu.sh OUT DIR}")
limit=${LIMIT:-500}
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$out"
out=$(realpath "$out")
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
b=/tmp/bars-bins
mkdir -p "$b"
ux() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2" && chmod +x "$2"; }
for n in bench test; do ux "$dir/$n.xz" "$b/$n" || { echo "no $dir/$n.xz"; exit 1; }; done
[ -f "$dir/loop.xz" ] && ux "$dir/loop.xz" "$b/loop"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$out/gpu.txt"
log() { echo "$@" | tee -a "$out/checks.txt"; }
passed() { grep -E '^\[  (PASSED|FAILED)' "$1" | tr '\n' ' '; }

timeout 240 "$b/test" > "$out/tests.txt" 2>&1
log "tests rc=$? $(passed "$out/tests.txt")"
grep -E '^\[  FAILED' "$out/tests.txt" | head -8 | tee -a "$out/checks.txt"
# Memcheck over the batch cases (sequences of other lengths, empty ones, pages of 1 and 7).
timeout 60 compute-sanitizer --tool memcheck --print-limit 5 "$b/test" \
  --gtest_filter='Cases/CudaDecode.*kv5000_77*:Cases/CudaDecode.*_17:Cases/CudaDecode.*kv100_0:Paged/CudaDecode.*_77_*:Paged/CudaDecode.*_1_page*' \
  > "$out/memcheck.txt" 2>&1
log "memcheck batches rc=$? $(grep 'ERROR SUMMARY' "$out/memcheck.txt" | tail -1) $(passed "$out/memcheck.txt")"

all=f16,bf16,q8_0,q4_0,turbo2,turbo3,turbo4,fp8_e4m3,fp8_e5m2
common=(--backend cuda -r 20 --warmup 3 --no-progress -o csv)
{
  "$b/bench" "${common[@]}" -ctk $all -d 4096,32768,131072,262144,1048576
  "$b/bench" "${common[@]}" -ctk q8_0 -ctv turbo4,q4_0 -d 262144,1048576 | tail -n +2
  "$b/bench" "${common[@]}" -ctk q8_0,q4_0,turbo3,fp8_e4m3 --heads 32/4 -d 262144,1048576 |
    tail -n +2
  "$b/bench" "${common[@]}" -ctk q8_0,q4_0,turbo3,fp8_e4m3 --head-dim 256 -d 262144,1048576 |
    tail -n +2
  "$b/bench" "${common[@]}" -ctk f16,q8_0,q4_0,turbo3,fp8_e4m3 -n 8 -d 32768,131072,1048576 |
    tail -n +2
} > "$out/bench_cuda.csv" 2> "$out/bench.err"
"$b/bench" "${common[@]}" -ctk $all --page-size 0,16 -d 4096,32768,131072,1048576 \
  > "$out/bench_paged.csv" 2>> "$out/bench.err"
{
  "$b/bench" "${common[@]}" -ctk $all --ragged serving64 --page-size 0,16
  "$b/bench" "${common[@]}" -ctk $all --ragged serving256 --page-size 0,16 | tail -n +2
} > "$out/bench_serving.csv" 2>> "$out/bench.err"
log "benches t=$SECONDS"
if [ -x "$b/loop" ]; then
  {
    echo "type,layers,depth,graphs,us/token,kernels us,overhead %,KV GB/s,graph kernels"
    for t in ${all//,/ }; do
      [ $SECONDS -lt $((limit - 90)) ] || break
      timeout 60 "$b/loop" -ctk "$t" -ctv "$t" -d 4096,32768,262144 -n 10 --graphs on -o csv |
        tail -n +2 | sed "s|^|$t,32,|"
    done
  } > "$out/loop_bars.csv" 2> "$out/loop_bars.err"
  log "loop t=$SECONDS"
fi
if [ $SECONDS -lt $((limit - 70)) ] && python3 -c 'import torch' > /dev/null 2>&1; then
  timeout $((limit - SECONDS - 10)) python3 scripts/bench_sdpa.py --heads 32/8 --head-dim 128 \
    -d 4096,32768,131072,262144,1048576 -n 1,8 -o "$out/bench_sdpa.csv" 2> "$out/bench_sdpa.err"
  log "sdpa rc=$? t=$SECONDS"
fi
python3 scripts/bars.py "$out" > "$out/bars.md" 2>&1
tail -n 1 "$out/bars.md" | tee -a "$out/checks.txt"
