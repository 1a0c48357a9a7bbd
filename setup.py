"""Builds and installs the Python package (docs/python.md) from this checkout:

    python3 -m pip install --no-build-isolation --no-deps .

The native module comes from the project's own CMake build (python/CMakeLists.txt), configured
for this interpreter, with the CUDA backend where nvcc is found (KVFLASH_CUDA=AUTO; CMAKE_ARGS
adds options, e.g. CMAKE_ARGS=-DKVFLASH_CUDA=OFF); the library is linked in statically, so the
package needs nothing else at run time. Needs cmake, a C++20 compiler, pybind11-dev, python3-dev.
"""

import os
import re
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def project_version():
    """The version of project() in CMakeLists.txt, the one place it is written."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(kvflash VERSION ([0-9.]+)", f.read()).group(1)


def pybind11_args():
    """pybind11's CMake files: Debian's are found by CMake itself; a pip-installed pybind11 (the
    build isolation of a package index) says where its are."""
    try:
        import pybind11
    except ImportError:
        return []
    return [f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"]


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.path.join(ROOT, "build", "python-package")
        args = ["-DCMAKE_BUILD_TYPE=Release", "-DKVFLASH_PYTHON=ON",
                f"-DPython3_EXECUTABLE={sys.executable}", "-DKVFLASH_BUILD_TESTS=OFF",
                "-DKVFLASH_BUILD_TOOLS=OFF", "-DKVFLASH_BUILD_SHARED=OFF", "-DKVFLASH_INSTALL=OFF"]
        args += pybind11_args() + shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build] + args)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build, "--target", "_kvflash", "-j", jobs])
        built = os.path.join(build, "python", "kvflash", os.path.basename(self.get_ext_fullpath(
            ext.name)))
        os.makedirs(os.path.dirname(self.get_ext_fullpath(ext.name)), exist_ok=True)
        self.copy_file(built, self.get_ext_fullpath(ext.name))


setup(
    name="kvflash",
    version=project_version(),
    description="Attention over compressed KV caches (q8_0, q4_0, turbo2/3/4, f16, bf16, f32)",
    license="Apache-2.0",
    packages=["kvflash"],
    package_dir={"": "python"},
    ext_modules=[Extension("kvflash._kvflash", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
)
