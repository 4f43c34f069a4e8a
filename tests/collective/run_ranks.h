// N ranks of a collective as threads of one test process (gloo's base_test idea): each
// connects over gloo's TCP transport on 127.0.0.1 through one in-memory rendezvous.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collective/collective.h"

namespace asgd::collective::testing {

inline CollectiveOptions RankOptions(
    int rank, int size, Algorithm algorithm = Algorithm::kRing,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  CollectiveOptions o;
  o.rank = rank;
  o.size = size;
  o.algorithm = algorithm;
  o.timeout = timeout;
  o.host = "127.0.0.1";
  return o;
}

// Runs body(collective) on `size` threads, one rank each, and fails the test with every
// rank's exception if any threw.
inline void RunRanks(int size, Algorithm algorithm, const std::function<void(Collective&)>& body) {
  auto rendezvous = NewInMemoryRendezvous();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto c = Connect(RankOptions(r, size, algorithm), rendezvous);
        body(*c);
        // As at the end of a run: no rank closes its connections while a peer may still
        // be reading its last message.
        c->Barrier();
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  // One rank's failure makes its peers fail too ("connection closed"); report them all so
  // the first cause is visible.
  std::string all;
  for (int r = 0; r < size; ++r) {
    if (!errors[static_cast<std::size_t>(r)]) continue;
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const std::exception& e) {
      all += "\n  rank " + std::to_string(r) + ": " + e.what();
    }
  }
  if (!all.empty()) FAIL() << "ranks failed:" << all;
}

}  // namespace asgd::collective::testing
