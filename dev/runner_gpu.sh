#!/usr/bin/env bash
# kvflash-run on the device in one bounded call, nothing built there (issue 41): test_gpu_run
# (the device forward pass against the CPU path, decode graphs against eager steps) plain and
# under compute-sanitizer memcheck, kvflash-run's tokens/s on the needle model (a 32K-byte prompt,
# f16 and q8_0 caches, decode graphs on and off, the CPU backend beside), then
# scripts/model/check.py --backend cuda to 128K bytes with the time left. Stops starting work
# LIMIT seconds (default 300) after its start. Pack on the CPU machine, carry DIR and .debs:
#   mkdir -p DIR && xz -T0 -c BUILD/tests/test_gpu_run > DIR/test_gpu_run.xz &&
#     xz -T0 -c BUILD/tools/run/kvflash-run > DIR/kvflash-run.xz
#   LIMIT=300 dev/runner_gpu.sh OUT DIR     (NEEDLES, DEPTHS, TYPES: check.py's lists)
# Writes OUT/summary.txt (the checks, the tokens/s lines, the check table) and the logs.
set -u
out=${1:?usage: dev/runner_gpu.sh OUT DIR}
dir=$(realpath "${2:?dir}")
limit=${LIMIT:-300}
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$out"
out=$(realpath "$out")
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
b=/tmp/runner-bins
mkdir -p "$b"
for n in test_gpu_run kvflash-run; do
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    "$dir/$n.xz" "$b/$n" && chmod +x "$b/$n" || { echo "no $dir/$n.xz"; exit 1; }
done
s="$out/summary.txt"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$s"
left() { echo $((limit - SECONDS)); }

# Optionally, another tree's GPU tests first (DIR/test_gpu_attention.xz: e.g. main's, to tell a
# candidate's failure from the tree's on this machine).
if [ -f "$dir/test_gpu_attention.xz" ]; then
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    "$dir/test_gpu_attention.xz" "$b/tga" && chmod +x "$b/tga"
  timeout 170 "$b/tga" > "$out/test_gpu_attention.txt" 2>&1
  echo "test_gpu_attention rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/test_gpu_attention.txt" | tr '\n' ' ' | cut -c1-600)" | tee -a "$s"
fi
timeout 120 "$b/test_gpu_run" > "$out/test.txt" 2>&1
echo "test_gpu_run rc=$? $(grep -E '^\[  (PASSED|FAILED)|NMSE' "$out/test.txt" | tr '\n' ' ')" | tee -a "$s"
grep -E -A3 'Failure' "$out/test.txt" | head -20 | tee -a "$s"
timeout 120 compute-sanitizer --tool memcheck --print-limit 5 "$b/test_gpu_run" > "$out/memcheck.txt" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$out/memcheck.txt" | tail -1)" | tee -a "$s"

cat docs/*.md README.md | head -c 32768 > /tmp/prompt32k.txt
for kv in f16 q8_0; do
  for g in on off; do
    echo "== cuda $kv graphs $g" >> "$s"
    timeout 60 "$b/kvflash-run" -m models/needle.gguf -f /tmp/prompt32k.txt -n 256 -ctk "$kv" \
      -b 4096 --backend cuda --graphs "$g" --no-progress 2>&1 >/dev/null | grep -E 'prefill|decode|cuda' >> "$s"
  done
done
echo "== cpu f16 (all cores)" >> "$s"
timeout 90 "$b/kvflash-run" -m models/needle.gguf -f /tmp/prompt32k.txt -n 32 -b 4096 --no-progress \
  2>&1 >/dev/null | grep -E 'prefill|decode' >> "$s"

t=$(left)
if [ "$t" -gt 30 ]; then
  echo "== check.py --backend cuda (timeout ${t}s)" >> "$s"
  timeout "$t" python3 scripts/model/check.py "$b/kvflash-run" models/needle.gguf --backend cuda \
    --chunk 4096 --depths "${DEPTHS:-1024,4096,16384,32768,65536,131072}" --needles "${NEEDLES:-10}" \
    --types "${TYPES:-f16,q8_0,q4_0,turbo4,turbo3,turbo2}" > "$out/check.txt" 2>&1
  echo "rc=$?" >> "$s"
  cat "$out/check.txt" >> "$s"
fi
cat "$s"
