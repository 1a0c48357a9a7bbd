# shellcheck shell=bash
# Sourced by the GPU A/B scripts (ab_gpu.sh, profile_ab_gpu.sh) from the repository root, after
# scripts/gpu_deps.sh (prefix_args): ab_build_trees OUT PATCH TAG [-R] copies this tree (no
# build/, no .git) to /tmp/TAG-b, applies PATCH there (-R: reverse-applies it), and builds
# kvflash-bench of both trees in parallel, half the cores each: build/TAG-a (this tree, A) and
# /tmp/TAG-b/build/TAG-b (B); logs in OUT (patch.txt, build_TAG-a.txt, build_TAG-b.txt). Sets
# bench_a and bench_b; returns 1, saying which step failed, on a failure.
ab_build_trees() {
  local out=$1 patch=$2 tag=$3
  shift 3
  [[ $patch == /* ]] || patch=$PWD/$patch
  rm -rf "/tmp/$tag-b" && mkdir -p "/tmp/$tag-b" &&
    tar cf - --exclude=./build --exclude=./.git . | tar xf - -C "/tmp/$tag-b"
  (cd "/tmp/$tag-b" && patch -p1 "$@" < "$patch") > "$out/patch.txt" 2>&1 ||
    { echo "patch failed"; cat "$out/patch.txt"; return 1; }
  local jobs
  jobs=$(nproc)
  ab_build_one() {  # src dir, build dir
    cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DKVFLASH_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix_args[@]}" > "$out/build_$(basename "$2").txt" 2>&1 &&
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
