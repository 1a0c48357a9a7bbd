#!/usr/bin/env bash
# The Python package installed as docs/python.md says, on a fresh venv over Debian's python3 (its
# setuptools, wheel and NumPy: --system-site-packages), with no package index: pip builds the
# checkout (setup.py drives the CMake build, CPU only here: the CUDA backend is the main build's
# to test), then the installed package quantizes, dequantizes and attends, checked against NumPy.
#   run_python_package_test.sh SOURCE_DIR WORK_DIR
# Exit 77 (CTest: skipped) where Debian's python3 lacks venv, setuptools, wheel or NumPy.
set -euo pipefail
src=$1 work=$2
py=/usr/bin/python3
if [ ! -x "$py" ] || ! "$py" -c 'import ensurepip, venv, setuptools, wheel, numpy' 2>/dev/null; then
  echo "no Debian python3 with venv, setuptools, wheel and numpy (scripts/setup.sh): skipped"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
"$py" -m venv --system-site-packages "$work/venv"
echo "== pip install --no-build-isolation --no-deps --no-index $src"
if ! CMAKE_ARGS="-DKVFLASH_CUDA=OFF" "$work/venv/bin/python" -m pip install --no-build-isolation \
  --no-deps --no-index "$src" > "$work/pip.log" 2>&1; then
  tail -40 "$work/pip.log"
  exit 1
fi
cd "$work"  # not the checkout: the installed package, not python/kvflash
"$work/venv/bin/python" - <<'PY'
import numpy as np
import kvflash

assert kvflash.__file__.startswith(__import__("sys").prefix), kvflash.__file__
rng = np.random.default_rng(0)
b, n, qh, kvh, d = 1, 100, 8, 2, 128
q = rng.standard_normal((b, 1, qh, d)).astype(np.float32)
k = rng.standard_normal((b, n, kvh, d)).astype(np.float32)
v = rng.standard_normal((b, n, kvh, d)).astype(np.float32)
kq, vq = kvflash.quantize(k, "q8_0"), kvflash.quantize(v, "q8_0")
kd, vd = kvflash.dequantize(kq, "q8_0", d), kvflash.dequantize(vq, "q8_0", d)
out = kvflash.attention(q, kq, vq, np.array([n], dtype=np.int64), k_type="q8_0", v_type="q8_0")
g = qh // kvh
ref = np.zeros_like(q)
for h in range(qh):
    s = kd[0, :, h // g] @ q[0, 0, h] / np.sqrt(d)
    p = np.exp(s - s.max())
    ref[0, 0, h] = (p / p.sum()) @ vd[0, :, h // g]
err = float(np.abs(out - ref).max())
assert err < 1e-5, err
print(f"installed kvflash {kvflash.__file__}: q8_0 attention against NumPy, max error {err:.2e}")
PY
echo "python package test: passed"
