// The `asgd` executable.
#include <iostream>
#include <string>
#include <vector>

#include "experiments/cli/cli.h"
#include "experiments/config/cpu_dispatch.h"

int main(int argc, char** argv) {
  // Before anything reads the variables or starts a thread; may execute the binary again.
  asgd::experiments::PinPortableDispatch(argv, std::cerr);
  std::vector<std::string> args(argv + 1, argv + argc);
  return asgd::experiments::Main(args, std::cout, std::cerr);
}
