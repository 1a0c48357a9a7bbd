# Cross-compiling for AArch64 Linux with Debian's cross toolchain (g++-aarch64-linux-gnu), the
# dependencies as Debian's arm64 packages (multiarch: dpkg --add-architecture arm64), the tests
# run under user-mode emulation (qemu-user). scripts/setup.sh --neon installs all three.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# The arm64 C library of the multiarch packages (libc6:arm64, which they pull in) runs the tests:
# -L /usr/aarch64-linux-gnu would pair the cross toolchain's loader with that newer libc.so.6, and
# the two must match (threads then hang in pthread_create).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
