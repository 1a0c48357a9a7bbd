// Parsing of the list flags the tools share, in the habits of llama-bench: comma lists, and ranges
// "first-last*factor" (multiplicative) or "first-last+step" (additive), e.g.
//   -d 1024-1048576*2        every power of two from 1K to 1M
//   -d 4096,32768,131072     a list
//   --heads 32/8,32/4        query heads / KV heads
//   --head-dim 128,576/512   K/V head dims (one number: the same for both)
//   -ctk f16,q8_0            KV types
// Every error names the flag, the offending text and what is allowed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvflash/formats.hpp"
#include "kvflash/problem.hpp"
#include "kvflash/status.hpp"

namespace kvflash::tools {

Expected<std::vector<int64_t>> parse_int_list(std::string_view flag, std::string_view text);
// One integer in [lo, hi] (0 allowed where lo is 0, unlike parse_int_list); the error names the
// flag, the text and the range.
Expected<int64_t> parse_int(std::string_view flag, std::string_view text, int64_t lo, int64_t hi);
Expected<std::vector<std::pair<int32_t, int32_t>>> parse_heads(std::string_view flag,
                                                               std::string_view text);
Expected<std::vector<HeadDims>> parse_head_dims(std::string_view flag, std::string_view text);
Expected<std::vector<KvType>> parse_types(std::string_view flag, std::string_view text);
// "1,5" style size with a unit: 80G, 141GiB, 512M, 1T (powers of 1024), or plain bytes.
Expected<int64_t> parse_bytes(std::string_view flag, std::string_view text);

std::vector<std::string> split(std::string_view text, char sep);

// llama-bench users type -ctk / -ctv; CLI11 takes one letter after a single dash, so the tools
// register --ctk / --ctv and the arguments are rewritten first ("-ctk" -> "--ctk",
// "-ctk=f16" -> "--ctk=f16"). Everything else passes through unchanged.
std::vector<std::string> llama_style_args(int argc, const char* const* argv);

}  // namespace kvflash::tools
