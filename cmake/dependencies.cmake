# Every dependency is a Debian package; a missing one stops the configure step with the package
# name to install (scripts/setup.sh installs them all).
function(kvflash_require pkg debian)
  find_package(${pkg} ${ARGN} QUIET)
  if(NOT ${pkg}_FOUND)
    message(FATAL_ERROR "kvflash needs ${pkg}: install it with `apt-get install ${debian}` "
                        "(or run scripts/setup.sh, which installs everything)")
  endif()
endfunction()

find_package(Threads REQUIRED)
kvflash_require(fmt libfmt-dev)
# The tools' packages, needed only where the tools are built.
if(KVFLASH_BUILD_TOOLS)
  kvflash_require(nlohmann_json nlohmann-json3-dev)
  kvflash_require(CLI11 libcli11-dev)
endif()
if(KVFLASH_BUILD_TESTS)
  kvflash_require(GTest "libgtest-dev libgmock-dev")
endif()

# CUDA: AUTO builds it when nvcc is found, ON requires it, OFF skips it.
set(KVFLASH_HAS_CUDA OFF)
if(NOT KVFLASH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 dialect (nvcc 12+ has it): declare it, so the CUDA
    # code is built as C++20 like the host code.
    if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0 AND NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      list(APPEND CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(KVFLASH_HAS_CUDA ON)
  elseif(KVFLASH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KVFLASH_CUDA=ON but no CUDA compiler (nvcc) was found: install the CUDA "
                        "toolkit or configure with -DKVFLASH_CUDA=OFF")
  endif()
endif()
message(STATUS "kvflash: CUDA backend ${KVFLASH_HAS_CUDA} (architectures ${CMAKE_CUDA_ARCHITECTURES})")
