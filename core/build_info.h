// What was built: version, commit, compiler, CUDA. Recorded in every run's provenance.
#pragma once

#include <string>

#include "core/build_config.h"

namespace asgd {

// The git commit the binary was built from ("unknown" outside a checkout), and whether
// tracked files had uncommitted changes at build time.
const char* GitCommit();
bool GitDirty();

// "asgd 0.1.0 (commit abc123, GNU 12.2.0, Release, CUDA nvcc 13.0 ...)"
std::string BuildDescription();
// The host name of this machine.
std::string HostName();

}  // namespace asgd
