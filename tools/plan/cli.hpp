// kvflash-plan's command line. run_plan is the whole tool with its streams passed in, so the tests
// run the CLI in-process and read back what it prints.
#pragma once

#include <ostream>

namespace kvflash::tools::plan {

// Exit codes: 0 success (or --help), 2 usage error (the message on `err` names the flag and what
// is allowed).
inline constexpr int kExitUsage = 2;

int run_plan(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace kvflash::tools::plan
