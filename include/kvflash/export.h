/* KVFLASH_API marks what the shared library exports: the C functions of kvflash.h and the public
 * C++ declarations of the kvflash/ .hpp headers. The library is built with hidden visibility, so
 * everything else (the backends, the kernels, the statically linked fmt and cudart) stays inside
 * it. CMake defines KVFLASH_BUILDING while building the library and KVFLASH_SHARED for users of
 * the shared library through its package (kvflash::kvflash; pkg-config's flags serve both
 * libraries and do not define it); only Windows needs the latter. Plain C, so that kvflash.h can
 * include it. */
#ifndef KVFLASH_EXPORT_H_
#define KVFLASH_EXPORT_H_

#if defined(_WIN32) && defined(KVFLASH_SHARED)
#if defined(KVFLASH_BUILDING)
#define KVFLASH_API __declspec(dllexport)
#else
#define KVFLASH_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define KVFLASH_API __attribute__((visibility("default")))
#else
#define KVFLASH_API
#endif

#endif /* KVFLASH_EXPORT_H_ */
