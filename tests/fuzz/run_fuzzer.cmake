# Runs one libFuzzer target for SECONDS over a fresh copy of its seed corpus (cmake -P; the
# arguments come from tests/fuzz/CMakeLists.txt). A finding fails the test and leaves its input
# in WORK/ (crash-*, leak-*, timeout-*): rerun it with `FUZZER WORK/crash-...`.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus)
file(GLOB seeds ${CORPUS}/*)
if(seeds)
  file(COPY ${seeds} DESTINATION ${WORK}/corpus)
endif()
execute_process(COMMAND ${FUZZER} -max_total_time=${SECONDS} -timeout=30 -rss_limit_mb=4096
                        -print_final_stats=1 -artifact_prefix=${WORK}/ ${WORK}/corpus
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} found a failure (exit ${rc}); its input is in ${WORK}/")
endif()
