#!/usr/bin/env bash
# Grows the committed fuzz corpora (tests/fuzz/corpus/<target>/, issue 40 point 4): each fuzz
# target of BUILD fuzzes a scratch copy of its corpus for SECONDS (tests/fuzz/run_fuzzer.cmake,
# as the CTest runs do), then libFuzzer's -merge=1 folds
# into the committed corpus only the inputs that reach coverage it lacks (minimized, named by
# their SHA-1), so a later CTest run starts where this one stopped. A finding stops the script
# and leaves its input in the scratch folder. Commit the new files afterwards.
#   dev/fuzz_merge.sh build/fuzz [SECONDS] [TARGET ...]     (BUILD: a -DKVFLASH_FUZZ=ON build)
set -eu
build=$(realpath "${1:?usage: dev/fuzz_merge.sh BUILD [SECONDS] [TARGET ...]}")
seconds=${2:-120}
shift $(( $# >= 2 ? 2 : 1 ))
cd "$(dirname "$0")/.."
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(validate formats attention gguf)
scratch=$(mktemp -d /tmp/fuzz-merge.XXXXXX)
for t in "${targets[@]}"; do
  fuzzer=$build/tests/fuzz/fuzz_$t
  corpus=tests/fuzz/corpus/$t
  [ -x "$fuzzer" ] || { echo "skip $t: no $fuzzer"; continue; }
  mkdir -p "$corpus"
  before=$(ls "$corpus" | wc -l)
  # The CTest fuzz run itself (a scratch copy of the corpus, the same limits), for SECONDS.
  cmake -DFUZZER="$fuzzer" -DCORPUS="$PWD/$corpus" -DWORK="$scratch/$t" -DSECONDS="$seconds" \
    -P tests/fuzz/run_fuzzer.cmake > "$scratch/$t.log" 2>&1 ||
    { echo "$t: a finding (input and log in $scratch/)"; tail -5 "$scratch/$t.log"; exit 1; }
  "$fuzzer" -merge=1 -timeout=30 -rss_limit_mb=4096 "$corpus" "$scratch/$t/corpus" \
    > "$scratch/$t.merge.log" 2>&1 || { echo "$t: merge failed"; tail -5 "$scratch/$t.merge.log"; exit 1; }
  echo "$t: $before -> $(ls "$corpus" | wc -l) corpus files ($(du -sh "$corpus" | cut -f1))"
done
rm -rf "$scratch"
