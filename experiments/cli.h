// The `asgd` command line: subcommand dispatch, argument parsing, and the mapping of
// errors to exit statuses.
//
// Exit statuses: 0 success; 2 bad input of any kind (config, arguments, data, a peer's
// message, a NaN loss) with one line on stderr saying what was wrong and what was
// expected; 1 another failure; 70 a broken internal invariant (a bug: please report).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace asgd::experiments {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInternal = 70;

// Runs the CLI with the given arguments (without the program name); normal output goes
// to out, errors to err.
int Main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The data search path for a config's [data] dir: that key, $ASGD_DATA_DIR, ./data,
// /usr/share/datasets (empty entries skipped).
std::vector<std::string> DataSearchDirs(const std::string& config_dir);

}  // namespace asgd::experiments
