// The `asgd` executable.
#include <iostream>
#include <string>
#include <vector>

#include "experiments/cli/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return asgd::experiments::Main(args, std::cout, std::cerr);
}
