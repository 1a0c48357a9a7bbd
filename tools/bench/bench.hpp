// kvflash-bench: attention speed over compressed KV caches, llama-bench style.
//
//   kvflash-bench                                   f16, q8_0, q4_0, turbo3 decode at 4K and 32K
//   kvflash-bench -ctk f16,q4_0 -d 1024-131072*2 --plot decode.svg
//   kvflash-bench -ctk q8_0 -ctv q4_0,turbo3 --heads 32/8,64/8 --head-dim 128,576/512
//   kvflash-bench -n 512 -d 4096,16384 -o json    prefill, TFLOP/s
//
// Tables go to `out` (stdout); the header (machine, bandwidth) goes there too for -o md and to
// `err` for csv/json so that stdout stays machine-readable. Exit codes: 0 every row ran, 1 a row
// or the backend failed (each failure is reported), 2 a usage error.
#pragma once

#include <ostream>

namespace kvflash::bench {

int run_bench(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace kvflash::bench
