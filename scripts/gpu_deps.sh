# shellcheck shell=bash disable=SC2034  # prefix_args is read by the sourcing script
# Sourced by the GPU scripts (scripts/gpu_run.sh; the lab's dev/ab_gpu.sh, dev/profile_gpu.sh, ...)
# from the repository root: the GPU machine may lack the Debian -dev packages kvflash builds with
# (fmt, CLI11, nlohmann-json, GoogleTest); if so they are unpacked from .debs/ (fetch them on a
# Debian machine with `apt-get download libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev
# libgtest-dev libgmock-dev` into .debs/ and carry that folder) into a private prefix. Sets
# `prefix_args` (the cmake arguments for that prefix, empty where the system has the headers) and
# LD_LIBRARY_PATH; returns 1, saying what is missing, where neither has them.
prefix_args=()
if [ ! -f /usr/include/fmt/format.h ] || [ ! -f /usr/include/CLI/CLI.hpp ] ||
   [ ! -f /usr/include/nlohmann/json.hpp ] || [ ! -f /usr/include/gtest/gtest.h ]; then
  if ls .debs/*.deb >/dev/null 2>&1; then
    kvflash_deps=/tmp/kvflash-deps
    for d in .debs/*.deb; do dpkg -x "$d" "$kvflash_deps"; done
    prefix_args=(-DCMAKE_PREFIX_PATH="$kvflash_deps/usr")
    export LD_LIBRARY_PATH="$kvflash_deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    echo "missing fmt/CLI11/nlohmann-json/GoogleTest headers and no .debs/ to unpack" >&2
    return 1
  fi
fi
# kvflash-run and test_gpu_run need libopenblas.so.0 at run time: where the machine lacks it,
# Debian's libopenblas0-pthread and libgfortran5 from .debs/ (`apt-get download
# libopenblas0-pthread libgfortran5`) are unpacked into the same private prefix.
if ! ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0' && ls .debs/libopenblas0-pthread_*.deb >/dev/null 2>&1; then
  kvflash_blas=/tmp/kvflash-deps
  for d in .debs/libopenblas0-pthread_*.deb .debs/libgfortran5_*.deb; do dpkg -x "$d" "$kvflash_blas"; done
  export LD_LIBRARY_PATH="$kvflash_blas/usr/lib/x86_64-linux-gnu/openblas-pthread:$kvflash_blas/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
