// Parsing a subcommand's arguments (Boost.Program_options), shared by the commands of
// the CLI: an unknown option or a malformed value is one InputError naming the command.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "core/error.h"

namespace asgd::experiments {

inline boost::program_options::variables_map ParseCommandLine(
    const std::vector<std::string>& args, const boost::program_options::options_description& desc,
    const boost::program_options::positional_options_description& pos, const std::string& command) {
  namespace po = boost::program_options;
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError("asgd " + command + ": " + e.what() + " (see `asgd " + command + " --help`)");
  }
  return vm;
}

// The usage text followed by the options' descriptions.
inline std::string CommandHelp(const std::string& usage,
                               const boost::program_options::options_description& desc) {
  std::ostringstream os;
  os << usage << "\n" << desc;
  return os.str();
}

}  // namespace asgd::experiments
