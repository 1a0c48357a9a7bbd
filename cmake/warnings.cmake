add_library(kvflash_warnings INTERFACE)
target_compile_options(kvflash_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Wno-missing-field-initializers
                            $<$<BOOL:${KVFLASH_WERROR}>:-Werror>>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall $<$<BOOL:${KVFLASH_WERROR}>:-Werror=all-warnings>>)

add_library(kvflash_sanitize INTERFACE)
if(KVFLASH_SANITIZE)
  target_compile_options(kvflash_sanitize INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  target_link_options(kvflash_sanitize INTERFACE -fsanitize=address,undefined)
endif()
if(KVFLASH_TSAN)
  if(KVFLASH_SANITIZE)
    message(FATAL_ERROR "KVFLASH_TSAN and KVFLASH_SANITIZE cannot be combined (ThreadSanitizer "
                        "excludes AddressSanitizer): configure one build for each")
  endif()
  target_compile_options(kvflash_sanitize INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread -fno-omit-frame-pointer>)
  target_link_options(kvflash_sanitize INTERFACE -fsanitize=thread)
endif()
