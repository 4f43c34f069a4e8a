// One rank of a two-process group meeting through the file store, for
// collective_test's FileRendezvousWithTwoProcesses:
//   collective_file_peer RANK SIZE STORE_DIR
// Allreduces (rank + 1) * i over i < 1000 and exits 0 if every element is exact, 1 if
// not, 2 on an error (printed as one line).

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "collective/collective.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: collective_file_peer RANK SIZE STORE_DIR\n");
    return 2;
  }
  try {
    asgd::collective::CollectiveOptions options;
    options.rank = std::stoi(argv[1]);
    options.size = std::stoi(argv[2]);
    options.timeout = std::chrono::milliseconds(10000);
    options.host = "127.0.0.1";
    auto c = asgd::collective::Connect(options, asgd::collective::NewFileRendezvous(argv[3]));
    std::vector<float> v(1000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((c->rank() + 1) * i);
    c->Allreduce(v);
    const float ranks_sum = static_cast<float>(options.size * (options.size + 1) / 2);
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] != ranks_sum * static_cast<float>(i)) {
        std::fprintf(stderr, "rank %d: element %zu is %g\n", c->rank(), i, double(v[i]));
        return 1;
      }
    }
    c->Barrier();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
