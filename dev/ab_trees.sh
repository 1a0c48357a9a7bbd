# shellcheck shell=bash
# Sourced by the GPU A/B scripts (ab_gpu.sh, ab_gpu_checked.sh, ab_env_gpu.sh, ab_loop_gpu.sh,
# profile_ab_gpu.sh) from the repository root, after scripts/gpu_deps.sh (prefix_args).

# ab_copy_tree DIR PATCH LOG [-R]: this tree (no build/, no .git) copied to DIR, PATCH applied
# there (-R: reverse-applied), patch's output in LOG; returns 1, saying so, if it does not apply.
ab_copy_tree() {
  local dir=$1 patch=$2 log=$3
  shift 3
  [[ $patch == /* ]] || patch=$PWD/$patch
  rm -rf "$dir" && mkdir -p "$dir" &&
    tar cf - --exclude=./build --exclude=./.git . | tar xf - -C "$dir"
  (cd "$dir" && patch -p1 "$@" < "$patch") > "$log" 2>&1 ||
    { echo "patch $patch failed"; cat "$log"; return 1; }
}

# ab_build_trees OUT PATCH TAG [-R]: ab_copy_tree to /tmp/TAG-b, then kvflash-bench of both trees
# built in parallel, half the cores each: build/TAG-a (this tree, A) and /tmp/TAG-b/build/TAG-b
# (B); logs in OUT (patch.txt, build_TAG-a.txt, build_TAG-b.txt). Sets bench_a and bench_b;
# returns 1, saying which step failed, on a failure.
ab_build_trees() {
  local out=$1 patch=$2 tag=$3
  shift 3
  ab_copy_tree "/tmp/$tag-b" "$patch" "$out/patch.txt" "$@" || return 1
  local jobs
  jobs=$(nproc)
  ab_build_one() {  # src dir, build dir
    cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON \
      -DKVFLASH_CUDA_ALL_PAIRS=ON -DCMAKE_CUDA_ARCHITECTURES=90a "${prefix_args[@]}" \
      > "$out/build_$(basename "$2").txt" 2>&1 &&
      cmake --build "$2" -j "$((jobs / 2 > 0 ? jobs / 2 : 1))" --target kvflash-bench \
        >> "$out/build_$(basename "$2").txt" 2>&1
  }
  ab_build_one . "build/$tag-a" & local pa=$!
  ab_build_one "/tmp/$tag-b" "/tmp/$tag-b/build/$tag-b" & local pb=$!
  wait $pa || { echo "build A failed"; tail -20 "$out/build_$tag-a.txt"; return 1; }
  wait $pb || { echo "build B failed"; tail -20 "$out/build_$tag-b.txt"; return 1; }
  bench_a=build/$tag-a/tools/bench/kvflash-bench
  bench_b=/tmp/$tag-b/build/$tag-b/tools/bench/kvflash-bench
}

# ab_gpu_checks OUT BUILD TAG SANITIZE RACECHECK_RUNS [VAR=VALUE ...]: the GPU tests and CUDA
# parity of the build folder BUILD, each under a timeout, with the VAR=VALUE settings in the
# environment; then, if SANITIZE is 1 and both passed, memcheck and RACECHECK_RUNS racecheck runs
# over the decode, graph and page-guard tests (AB_FILTER: another gtest filter). Logs
# OUT/tests$TAG.txt, parity$TAG.txt, memcheck$TAG.txt, racecheck${TAG}_N.txt; appends (and
# prints) a summary to OUT/checks.txt. Returns 1 if the tests or parity failed.
ab_gpu_checks() {
  local out=$1 build=$2 tag=$3 sanitize=$4 rc_runs=$5
  shift 5
  local trc prc r
  {
    echo "== checks${*:+ with $*}"
    env "$@" timeout 120 "$build/tests/test_gpu_attention" > "$out/tests$tag.txt" 2>&1
    trc=$?
    tail -n 3 "$out/tests$tag.txt"
    echo "tests rc=$trc"
    env "$@" timeout 150 "$build/tools/parity/kvflash-parity" --backend cuda \
      > "$out/parity$tag.txt" 2>&1
    prc=$?
    tail -n 2 "$out/parity$tag.txt"
    echo "parity rc=$prc"
    grep -m5 FAIL "$out/parity$tag.txt"
  } | tee -a "$out/checks.txt"
  trc=$(sed -n 's/^tests rc=//p' "$out/checks.txt" | tail -1)
  prc=$(sed -n 's/^parity rc=//p' "$out/checks.txt" | tail -1)
  [ "$trc" = 0 ] && [ "$prc" = 0 ] || return 1
  [ "$sanitize" = 1 ] || return 0
  # The decode tests (contiguous and paged, the length guard), the graph tests and the page
  # guards; AB_FILTER replaces the list.
  local filter=${AB_FILTER:-'*CudaDecode*:CudaGraph.*:GpuKvCache.Page*'}
  {
    env "$@" timeout 150 compute-sanitizer --tool memcheck "$build/tests/test_gpu_attention" \
      --gtest_filter="$filter" > "$out/memcheck$tag.txt" 2>&1
    echo "memcheck rc=$? $(grep "ERROR SUMMARY" "$out/memcheck$tag.txt" | tail -1)"
    # (Changes to barriers or shared memory: a hazard has shown in one run of four, so repeat.)
    for r in $(seq "$rc_runs"); do
      env "$@" KVFLASH_GPU_TEST_QUICK=1 timeout 200 compute-sanitizer --tool racecheck \
        --error-exitcode 1 "$build/tests/test_gpu_attention" --gtest_filter="$filter" \
        > "$out/racecheck${tag}_$r.txt" 2>&1
      echo "racecheck $r rc=$? $(grep -E "RACECHECK SUMMARY" "$out/racecheck${tag}_$r.txt" | tail -1)"
    done
  } | tee -a "$out/checks.txt"
  return 0
}

# ab_unpack_prebuilt DIR BUILD: the binaries dev/ab_prebuild.sh packed into DIR (xz) unpacked
# into BUILD, where ab_gpu_checks and the bench runs look for them: BUILD/tools/bench/kvflash-bench
# (A), BUILD/bench-b/kvflash-bench (B), BUILD/tests/test_gpu_attention and
# BUILD/tools/parity/kvflash-parity (A). Returns 1, saying which, if one is missing.
ab_unpack_prebuilt() {
  local dir=$1 build=$2 name dest
  for name in kvflash-bench:tools/bench kvflash-bench-b:bench-b test_gpu_attention:tests \
    kvflash-parity:tools/parity; do
    dest=$build/${name#*:}
    mkdir -p "$dest"
    [ -f "$dir/${name%%:*}.xz" ] || { echo "prebuilt: no $dir/${name%%:*}.xz"; return 1; }
    local bin=$dest/${name%%:*}
    bin=${bin%-b}
    if command -v xz > /dev/null; then
      xz -dc "$dir/${name%%:*}.xz" > "$bin" || return 1
    else
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$dir/${name%%:*}.xz" "$bin" || return 1
    fi
    chmod +x "$bin"
  done
}
