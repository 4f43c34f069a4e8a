// The exit statuses of `asgd` and of every role of a multi-process run: 0 success; 2 bad
// input of any kind (config, arguments, data, a peer's message, a NaN loss) with one line
// on stderr saying what was wrong and what was expected; 1 another failure; 70 a broken
// internal invariant (a bug: please report).
#pragma once

namespace asgd::experiments {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInternal = 70;

}  // namespace asgd::experiments
