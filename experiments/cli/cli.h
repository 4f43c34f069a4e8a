// The `asgd` command line: subcommand dispatch, argument parsing, and the mapping of
// errors to exit statuses.
//
// Exit statuses: experiments/config/exit_status.h.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "experiments/config/exit_status.h"

namespace asgd::experiments {

// Runs the CLI with the given arguments (without the program name); normal output goes
// to out, errors to err.
int Main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace asgd::experiments
