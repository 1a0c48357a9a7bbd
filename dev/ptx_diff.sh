#!/usr/bin/env bash
# Whether a change alters the CUDA kernels at all, on the CPU machine (no GPU, no disassembler
# needed): compiles every .cu of src/backends/cuda (instances included) to PTX for sm_90a (the
# build's arch: for sm_90 the wgmma and setmaxnreg code is compiled out) in this
# tree and in REV (a commit, checked out into a temporary worktree), and prints, per file, "same"
# or the number of differing PTX lines. Exit 0 when every file's PTX is identical up to virtual
# register numbers. A pure move or rename of kernel code must print only "same" or "same
# instructions" (issue 38, point 8).
#   dev/ptx_diff.sh REV [FILE_GLOB]       e.g. dev/ptx_diff.sh HEAD 'decode_k_q4_0*'
set -u
rev=${1:?usage: dev/ptx_diff.sh REV [FILE_GLOB]}
glob=${2:-*}
cd "$(dirname "$0")/.." || exit 1
base=$(mktemp -d /tmp/ptx-base.XXXXXX)
git worktree add --detach "$base" "$rev" > /dev/null 2>&1 || { echo "no worktree for $rev"; exit 2; }
trap 'git worktree remove --force "$base"' EXIT
ptx() {  # tree file out
  /usr/local/cuda/bin/nvcc -O3 -DNDEBUG -arch=sm_90a --expt-relaxed-constexpr -std=c++20 \
    -I "$1/include" -I "$1/src" -ptx "$1/$2" -o "$3" 2> "$3.err"
}
status=0
jobs=$(nproc)
files=$(cd src && find backends/cuda -name "$glob.cu" | sort)
for f in $files; do
  ( ptx . "src/$f" "/tmp/ptx-new-$(basename "$f").ptx"; ptx "$base" "src/$f" "/tmp/ptx-old-$(basename "$f").ptx" ) &
  while [ "$(jobs -r | wc -l)" -ge "$jobs" ]; do sleep 1; done
done
wait
for f in $files; do
  b=$(basename "$f")
  if [ ! -s "/tmp/ptx-new-$b.ptx" ] || [ ! -s "/tmp/ptx-old-$b.ptx" ]; then
    echo "$f: did not compile"; cat "/tmp/ptx-new-$b.ptx.err" "/tmp/ptx-old-$b.ptx.err"; status=1; continue
  fi
  # The PTX names the source file, and anonymous namespaces carry a hash of its path: compare
  # without file directives and comments, those hashes masked.
  norm() { grep -v '^\s*\.file\|^\s*//' "$1" | sed 's/_GLOBAL__N__[0-9a-f]*_/_GLOBAL__N__/g'; }
  n=$(diff <(norm "/tmp/ptx-new-$b.ptx") <(norm "/tmp/ptx-old-$b.ptx") | grep -c '^[<>]')
  # Virtual register numbers and label names shift when code moves between functions that are
  # inlined anyway: report whether the instructions are the same apart from them.
  regs() { norm "$1" | sed -E 's/%(r|rd|f|fd|p|rs|h|hh)[0-9]+/%\1/g; s/\$L__BB[0-9_]+/L/g; /^\s*\.reg /d'; }
  m=$(diff <(regs "/tmp/ptx-new-$b.ptx") <(regs "/tmp/ptx-old-$b.ptx") | grep -c '^[<>]')
  if [ "$n" = 0 ]; then
    echo "$f: same"
  elif [ "$m" = 0 ]; then
    echo "$f: same instructions (virtual register numbers differ)"
  else
    echo "$f: $n lines differ ($m apart from register numbers)"
    status=1
  fi
done
exit $status
