# What `cmake --install` puts under the prefix: the public headers (include/kvflash/, the
# generated version.h included), libkvflash.so and libkvflash.a, the CMake package
# (find_package(kvflash CONFIG): kvflash::kvflash, kvflash::kvflash_static, component CUDA) and
# the pkg-config file kvflash.pc. tests/install/ builds a consumer against the result.
include(CMakePackageConfigHelpers)

set(KVFLASH_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvflash)
set(targets kvflash_headers)
if(KVFLASH_BUILD_SHARED)
  list(APPEND targets kvflash)
endif()
if(KVFLASH_BUILD_STATIC)
  list(APPEND targets kvflash_static)
endif()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kvflash ${PROJECT_BINARY_DIR}/include/kvflash
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT kvflash_dev)
install(TARGETS ${targets} EXPORT kvflashTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT kvflash_runtime
                NAMELINK_COMPONENT kvflash_dev
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT kvflash_dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT kvflashTargets NAMESPACE kvflash:: DESTINATION ${KVFLASH_CMAKE_DIR}
        COMPONENT kvflash_dev)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvflashConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kvflashConfig.cmake
                              INSTALL_DESTINATION ${KVFLASH_CMAKE_DIR})
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvflashConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvflashConfig.cmake
              ${PROJECT_BINARY_DIR}/kvflashConfigVersion.cmake
        DESTINATION ${KVFLASH_CMAKE_DIR} COMPONENT kvflash_dev)

# pkg-config: `Libs` for the shared library; `Libs.private` is what linking libkvflash.a
# needs besides (pkg-config --static): the C++ runtime, threads and, with CUDA, cudart_static.
set(KVFLASH_PC_LIBS_PRIVATE "-lstdc++ -lm -pthread")
if(KVFLASH_HAS_CUDA)
  string(PREPEND KVFLASH_PC_LIBS_PRIVATE
         "-L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt ")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(KVFLASH_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(KVFLASH_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(KVFLASH_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(KVFLASH_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(prefix "@prefix@")  # left for the install step
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvflash.pc.in ${PROJECT_BINARY_DIR}/kvflash.pc.in @ONLY)
# The prefix is the one given to `cmake --install --prefix`, known only at install time.
install(CODE "
  set(prefix \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${PROJECT_BINARY_DIR}/kvflash.pc.in\" \"${PROJECT_BINARY_DIR}/kvflash.pc\" @ONLY)
" COMPONENT kvflash_dev)
install(FILES ${PROJECT_BINARY_DIR}/kvflash.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT kvflash_dev)
