// CLI11 parsing of the tools' command lines after llama_style_args's rewrite (-ctk / -ctv as
// llama-bench users type them), so that each tool does not repeat it. Throws what CLI11's parse
// throws (CLI::ParseError, CLI::CallForHelp): each tool answers those its own way.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "common/cli_parse.hpp"

namespace kvflash::tools {

inline void parse_llama_style(CLI::App& app, int argc, const char* const* argv) {
  const std::vector<std::string> args = llama_style_args(argc, argv);
  std::vector<const char*> ptrs;
  ptrs.reserve(args.size());
  for (const std::string& s : args) ptrs.push_back(s.c_str());
  app.parse(static_cast<int>(ptrs.size()), ptrs.data());
}

}  // namespace kvflash::tools
