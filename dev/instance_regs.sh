#!/usr/bin/env bash
# Registers and spills of the decode kernels of some default-pair instance files, from ptxas on the
# CPU machine (no GPU): one line per kernel, its template arguments (K type, V type as KvType
# numbers; NR; KS; PR) and what ptxas reports. The kernels run at a register bound (128, or 96 for
# the int8 Q.K^T ones that fit five CTAs per SM): compare a change's lines with HEAD's before
# spending GPU time on it (a spill fails the CUDA build under -Werror; a kernel that grows past
# 96 registers loses its fifth CTA).
#   dev/instance_regs.sh BUILD [-DMACRO ...] -- PAIR...     e.g. build/new -- q4_0_q4_0 turbo4_turbo4
# BUILD: a configured CUDA build of this tree (its include paths and flags are used).
set -eu
build=$(realpath "${1:?usage: dev/instance_regs.sh BUILD [NVCC FLAGS] -- PAIR...}")
shift
extra=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do extra+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
cuda=$build/src/backends/cuda
get() { sed -n "s/^$1 = //p" "$cuda/CMakeFiles/kvflash_cuda.dir/flags.make"; }
read -r -a defines <<< "$(get CUDA_DEFINES)"
nvcc=$(sed -n 's/^# compile CUDA with //p' "$cuda/CMakeFiles/kvflash_cuda.dir/flags.make")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for pair in "$@"; do
  (cd "$cuda" && "$nvcc" "${defines[@]}" "${extra[@]}" \
     --options-file CMakeFiles/kvflash_cuda.dir/includes_CUDA.rsp -O3 -DNDEBUG \
     --generate-code=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -std=c++20 \
     -Xptxas=-v -c "$root/src/backends/cuda/decode/instances/default_pairs/decode_$pair.cu" \
     -o "$tmp/x.o" 2>&1) |
    python3 -c '
import re, sys
pair, kernel = sys.argv[1], None
for line in sys.stdin:
    m = re.search(r"Compiling entry function .(\S+).", line)
    if m:
        kernel = m.group(1)
        continue
    s = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if s and kernel:
        spills = f"spill st {s.group(1)} ld {s.group(2)}"
    r = re.search(r"Used (\d+) registers", line)
    if r and kernel:
        t = re.search(r"decode_kernelILNS_6KvTypeE(\d+)ELS\w+?_(\d+)ELi(\d)ELb(\d)E(?:Lb(\d)E)?", kernel)
        if t:
            pr = t.group(5) or "-"
            print(f"{pair:16s} K {t.group(1)} V {t.group(2)} NR {t.group(3)} KS {t.group(4)} PR {pr}: "
                  f"{r.group(1)} registers, {spills}")
        kernel = None
' "$pair"
done
