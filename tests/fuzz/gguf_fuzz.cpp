// libFuzzer target: kvflash-run's GGUF reader on arbitrary bytes (issue 41 point 4). Whatever the
// input, parse_gguf returns a file or an error, never reads outside the bytes (ASan) and never
// allocates what the bytes cannot back; a file it accepts has every tensor inside the input, which
// this target reads through.
#include <cstddef>
#include <cstdint>
#include <span>

#include "run/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvflash::tools::run;
  const kvflash::Expected<GgufFile> f = parse_gguf(std::span<const uint8_t>(data, size));
  if (!f.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const GgufTensor& t : f->tensors)
    for (uint64_t i = 0; i < t.bytes; i += 61) sink = sink ^ t.data[i];
  for (const auto& [key, value] : f->metadata) sink = sink ^ static_cast<uint8_t>(key.size());
  return 0;
}
