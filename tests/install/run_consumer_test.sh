#!/usr/bin/env bash
# The installed tree, used as a user would: installs the current build (no rebuild) into a
# temporary prefix, then builds and runs tests/install/consumer/ against it with
# find_package(kvflash CONFIG) (its CUDA component as the build has it; C11 and C++17 on the C
# API, shared and static; C++20 on the C++ API), builds main.c by hand with pkg-config (shared,
# and static with --static), and configures tests/install/subproject/ (add_subdirectory of the
# source tree: library targets only).
#   run_consumer_test.sh SOURCE_DIR BUILD_DIR WORK_DIR C_COMPILER CXX_COMPILER [FLAGS [LINK_FLAGS
#                        [HAS_CUDA]]]
# FLAGS (one string) go to every compile and link, LINK_FLAGS to every link: the sanitizer flags
# of a sanitizer build. HAS_CUDA (ON / OFF): whether the build has the CUDA backend, which the
# package's CUDA component must say.
set -euo pipefail
src=$1 build=$2 work=$3 cc=$4 cxx=$5 flags=${6:-} link_flags=${7:-} has_cuda=${8:-}
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
step() { echo "== install test: $*"; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
libdir=$(find "$prefix" -name libkvflash.so -printf '%h\n' | head -n 1)
for f in include/kvflash/kvflash.h include/kvflash/version.h include/kvflash/export.h \
         include/kvflash/registry.hpp; do
  [ -f "$prefix/$f" ] || { echo "missing $prefix/$f" >&2; exit 1; }
done
for f in libkvflash.so libkvflash.a cmake/kvflash/kvflashConfig.cmake pkgconfig/kvflash.pc; do
  [ -e "$libdir/$f" ] || { echo "missing $libdir/$f" >&2; exit 1; }
done
if grep -rlq "fmt/" "$prefix/include"; then
  echo "the installed headers include fmt: $(grep -rl "fmt/" "$prefix/include")" >&2
  exit 1
fi

step "find_package(kvflash CONFIG) consumer"
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -G "Unix Makefiles" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags $link_flags" ${has_cuda:+-DKVFLASH_EXPECT_CUDA=$has_cuda} \
  >"$work/consumer.log" || { cat "$work/consumer.log"; exit 1; }
cmake --build "$work/consumer" -j 2 >>"$work/consumer.log" || { cat "$work/consumer.log"; exit 1; }
for exe in c_shared c_static cxx17_shared cxx20_shared; do
  "$work/consumer/$exe"
done
# The static executable does not need the shared library.
if readelf -d "$work/consumer/c_static" | grep -q "libkvflash"; then
  echo "c_static needs libkvflash.so" >&2
  exit 1
fi

step "pkg-config"
command -v pkg-config >/dev/null || { echo "pkg-config not found (apt-get install pkg-config)" >&2; exit 1; }
export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046,SC2086  # word splitting of the flags is intended
"$cc" -std=c11 $flags $link_flags "$src/tests/install/consumer/main.c" -o "$work/pc_shared" \
  $(pkg-config --cflags --libs kvflash) -lm
LD_LIBRARY_PATH=$libdir "$work/pc_shared"
# Static: the archive by name (-l:libkvflash.a: -lkvflash would take the .so beside it), and
# what it needs from Libs.private.
static_libs=$(pkg-config --static --libs kvflash)
# shellcheck disable=SC2046,SC2086
"$cc" -std=c11 $flags $link_flags "$src/tests/install/consumer/main.c" -o "$work/pc_static" \
  $(pkg-config --cflags kvflash) ${static_libs/-lkvflash/-l:libkvflash.a} -lm
"$work/pc_static"

step "add_subdirectory consumer (configure only)"
cmake -S "$src/tests/install/subproject" -B "$work/subproject" -G "Unix Makefiles" \
  -DKVFLASH_SOURCE_DIR="$src" -DKVFLASH_CUDA=OFF -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_CXX_COMPILER="$cxx" --no-warn-unused-cli -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON >"$work/subproject.log" || { cat "$work/subproject.log"; exit 1; }
echo "install test: passed"
