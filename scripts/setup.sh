#!/usr/bin/env bash
# Installs what kvflash needs to build and test on a Debian machine (as root), or says exactly
# what to install when it cannot. Safe to run again: it installs only what is missing.
set -euo pipefail

# clang: the "asan" preset (scripts/test.sh --asan) builds with it; pkg-config: the install test;
# libopenblas-dev: kvflash-run's matrix products (tools/run); python3-dev, pybind11-dev,
# python3-numpy, python3-pytest: the Python package and its tests (python/; python3-torch, large,
# is optional: the tests that need it skip without it); python3-pip, python3-venv,
# python3-setuptools, python3-wheel: `pip install --no-build-isolation .` of the package
# (docs/python.md), which builds with the interpreter's own setuptools and wheel.
packages=(cmake g++ make clang pkg-config libgtest-dev libgmock-dev libfmt-dev nlohmann-json3-dev
          libcli11-dev libopenblas-dev python3-dev pybind11-dev python3-numpy python3-pytest
          python3-pip python3-venv python3-setuptools python3-wheel)
# --neon (on x86-64): the AArch64 cross compiler, qemu-user and the arm64 builds of the test
# dependencies (Debian multiarch), for the "neon" preset: the NEON kernels built and tested under
# emulation (scripts/test.sh runs it).
neon_packages=(g++-aarch64-linux-gnu qemu-user libfmt-dev:arm64 libgtest-dev:arm64
               libgmock-dev:arm64)
add_arm64=0
if [ "${1:-}" = "--neon" ]; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then add_arm64=1; fi
  packages+=("${neon_packages[@]}")
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "kvflash needs these Debian packages: ${missing[*]}" >&2
  if [ $add_arm64 -eq 1 ]; then
    echo "install them with: sudo dpkg --add-architecture arm64 && sudo apt-get update &&" \
         "sudo apt-get install -y ${missing[*]}" >&2
  else
    echo "install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  fi
  exit 1
fi
echo "kvflash setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if [ $add_arm64 -eq 1 ]; then dpkg --add-architecture arm64; fi
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
