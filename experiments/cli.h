// The `asgd` command line: subcommand dispatch, argument parsing, and the mapping of
// errors to exit statuses.
//
// Exit statuses: experiments/exit_status.h.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "experiments/exit_status.h"

namespace asgd::experiments {

// Runs the CLI with the given arguments (without the program name); normal output goes
// to out, errors to err.
int Main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The data search path for a config's [data] dir: that key, $ASGD_DATA_DIR, ./data,
// /usr/share/datasets (empty entries skipped).
std::vector<std::string> DataSearchDirs(const std::string& config_dir);

}  // namespace asgd::experiments
