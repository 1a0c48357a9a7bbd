#!/usr/bin/env bash
# One bounded device call for a CUDA prefill change, nothing built on the device: the candidate's
# GPU tests, compute-sanitizer memcheck over every prefill test (and over the head-dim and paged
# ones with KVFLASH_PREFILL_NO_TMA=1: the kernel with its threads' copies), then ROUNDS rounds of
# prebuilt kvflash-bench binaries in turns (the order rotates each round) on the prefill matrix
# below, then racecheck over the pair, paged and guard tests with the time left. Stops starting
# work LIMIT seconds (default 450) after its start, so that whatever ran comes back.
#   dev/ab_bins_pack.sh DIR old=BUILD_A new=BUILD_B     (on the CPU machine; carry DIR and .debs)
#   LIMIT=420 dev/prefill_ab_gpu.sh OUT ROUNDS DIR old new [NAME@VAR=VALUE ...]
# A side is NAME (DIR/NAME.bench.xz) or NAME@VAR=VALUE (that binary with a setting, e.g.
# new@KVFLASH_PREFILL_NO_TMA=1); DIR/test_gpu_attention.xz is the candidate's (the last pair
# packed). PREFILL_AB_SETS="FLAGS|FLAGS" replaces the matrix; PREFILL_AB_MEMCHECK,
# PREFILL_AB_NOTMA and PREFILL_AB_RACECHECK replace the three checks' gtest filters (empty: that
# check is skipped). Writes OUT/checks.txt, OUT/gpu.txt, OUT/sides.md (medians over rounds of
# the per-run medians, the first side's time over each other side's: above 1, that side is
# faster) and OUT/raw.tgz (SIDE_ROUND.csv per side and round, the tests' and sanitizers' logs:
# one archive, since a device call returns at most 8 files).
set -u
out=${1:?usage: dev/prefill_ab_gpu.sh OUT ROUNDS DIR SIDE [SIDE ...]}
rounds=${2:?rounds}
dir=$(realpath "${3:?dir}")
shift 3
sides=("$@")
limit=${LIMIT:-450}
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$out"
out=$(realpath "$out")
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh || exit 1
b=/tmp/prefill-ab-bins
mkdir -p "$b"
ux() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2" && chmod +x "$2"; }
for s in "${sides[@]}"; do
  n=${s%%@*}
  [ -x "$b/$n" ] || ux "$dir/$n.bench.xz" "$b/$n" || { echo "no $dir/$n.bench.xz"; exit 1; }
done
ux "$dir/test_gpu_attention.xz" "$b/t" || exit 1
nvidia-smi --query-gpu=name --format=csv,noheader > "$out/gpu.txt"
log() { echo "$@" | tee -a "$out/checks.txt"; }
left() { echo $((limit - SECONDS)); }
passed() { grep -E '^\[  (PASSED|FAILED)' "$1" | tr '\n' ' '; }

timeout 200 "$b/t" > "$out/tests.txt" 2>&1
trc=$?
log "tests rc=$trc $(passed "$out/tests.txt")"
grep -E '^\[  FAILED' "$out/tests.txt" | head -8 | tee -a "$out/checks.txt"
mc=${PREFILL_AB_MEMCHECK-'*/CudaPrefill.*:CudaPrefill*'}
if [ -n "$mc" ]; then
  timeout 170 compute-sanitizer --tool memcheck --print-limit 5 "$b/t" \
    --gtest_filter="$mc" > "$out/memcheck.txt" 2>&1
  log "memcheck $mc rc=$? $(grep 'ERROR SUMMARY' "$out/memcheck.txt" | tail -1) $(passed "$out/memcheck.txt")"
  grep -m1 -A12 '^========= [A-Z]' "$out/memcheck.txt" | grep -v 'COMPUTE-SANITIZER' | head -12 |
    tee -a "$out/checks.txt"
fi
nt=${PREFILL_AB_NOTMA-'HeadDims/CudaPrefill.*:Paged/CudaPrefill.*'}
if [ -n "$nt" ]; then
  KVFLASH_PREFILL_NO_TMA=1 timeout 80 compute-sanitizer --tool memcheck --print-limit 5 "$b/t" \
    --gtest_filter="$nt" > "$out/memcheck_notma.txt" 2>&1
  log "memcheck NO_TMA $nt rc=$? $(grep 'ERROR SUMMARY' "$out/memcheck_notma.txt" | tail -1) $(passed "$out/memcheck_notma.txt")"
fi

F="-r 5 --warmup 2 --heads 32/8 --head-dim 128"
sets=("$F -d 8192 -n 8192 --ctk f16,q8_0,q4_0,turbo3"
      "$F -d 32768 -n 2048 --ctk f16,q8_0,q4_0,turbo3"
      "$F -d 32768 -n 2048 --ctk q8_0 --ctv turbo4"
      "$F -d 32768 -n 2048 --ctk f16,q4_0 --page-size 16,64"
      "-r 5 --warmup 2 --heads 32/8 --head-dim 64,256 -d 8192 -n 8192 --ctk f16,q8_0")
[ -n "${PREFILL_AB_SETS:-}" ] && IFS='|' read -r -a sets <<< "$PREFILL_AB_SETS"
side_file() { echo "$1" | tr -c 'A-Za-z0-9_.\n-' '-'; }
if [ "$trc" = 0 ]; then
  for r in $(seq "$rounds"); do
    [ "$(left)" -lt 150 ] && break
    for i in "${!sides[@]}"; do
      s=${sides[$(( (i + r) % ${#sides[@]} ))]}
      e=()
      [[ $s == *@* ]] && e=("${s#*@}")
      f="$out/$(side_file "$s")_$r.csv"
      : > "$f"
      for x in "${sets[@]}"; do
        # shellcheck disable=SC2086  # a flag set, split on purpose
        env "${e[@]}" timeout 60 "$b/${s%%@*}" --backend cuda --no-progress -o csv $x \
          2>> "$out/bench.err" >> "$f"
      done
    done
    log "round $r done at ${SECONDS}s"
  done
fi
rc_filter=${PREFILL_AB_RACECHECK-'Pairs/CudaPrefill.*:Paged/CudaPrefill.*:CudaPrefillPages.*:CudaPrefillLengths.*'}
if [ "$(left)" -gt 40 ] && [ -n "$rc_filter" ]; then
  KVFLASH_GPU_TEST_QUICK=1 timeout $(( $(left) - 20 )) compute-sanitizer --tool racecheck \
    --error-exitcode 1 "$b/t" --gtest_filter="$rc_filter" > "$out/racecheck.txt" 2>&1
  log "racecheck prefill rc=$? $(grep 'RACECHECK SUMMARY' "$out/racecheck.txt" | tail -1) $(passed "$out/racecheck.txt")"
fi
python3 - "$out" "${sides[@]}" <<'PY' | tee "$out/sides.md"
import collections, csv, glob, os, re, statistics, sys
out, sides = sys.argv[1], sys.argv[2:]
name = {re.sub(r"[^A-Za-z0-9_.\n-]", "-", s): s for s in sides}
rows = collections.defaultdict(lambda: collections.defaultdict(list))
tf = collections.defaultdict(dict)
for f in glob.glob(os.path.join(out, "*_[0-9]*.csv")):
    side = name.get(os.path.basename(f).rsplit("_", 1)[0])
    if side is None:
        continue
    for r in csv.DictReader(l for l in open(f) if not l.startswith("#")):
        if r.get("backend") in (None, "backend"):
            continue
        key = " ".join(r[k] for k in ("k_type", "v_type", "head_dim_k", "n_q", "depth", "test"))
        rows[key][side].append(float(r["us_median"]))
        tf[key][side] = float(r["tflops"])
first = sides[0]
print("| row | " + " | ".join(f"{s} µs" for s in sides) + " | " +
      " | ".join(f"{s} TFLOP/s" for s in sides[1:]) + " | " +
      " | ".join(f"{first}/{s}" for s in sides[1:]) + " |")
for k in sorted(rows):
    med = {s: statistics.median(rows[k][s]) for s in sides if rows[k][s]}
    cell = lambda v: f"{v:.1f}" if v is not None else "-"
    ratio = lambda s: f"{med[first] / med[s]:.3f}" if first in med and s in med else "-"
    print(f"| {k} | " + " | ".join(cell(med.get(s)) for s in sides) + " | " +
          " | ".join(cell(tf[k].get(s)) for s in sides[1:]) + " | " +
          " | ".join(ratio(s) for s in sides[1:]) + " |")
PY
raw=()
for f in "$out"/*_[0-9]*.csv "$out"/tests.txt "$out"/memcheck*.txt "$out"/racecheck.txt \
  "$out"/bench.err; do
  [ -f "$f" ] && raw+=("$(basename "$f")")
done
[ ${#raw[@]} -gt 0 ] && tar czf "$out/raw.tgz" -C "$out" --remove-files "${raw[@]}"
cat "$out/checks.txt"
