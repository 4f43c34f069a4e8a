// Checks for internal invariants. A failed check throws InvariantError naming the
// expression, both values (for the comparison forms), the source location and an
// optional message built from the extra arguments:
//
//   ASGD_CHECK(offset <= size, "tensor ", name, " overflows the layout");
//   ASGD_CHECK_EQ(grad.size(), params.size());
//
// Checks are always on (they guard memory safety on hot paths only where cheap).
// They are for bugs; bad user input is InputError (core/error.h).
#pragma once

#include <sstream>
#include <string>

#include "core/error.h"

namespace asgd::internal {

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void CheckFailed(const char* file, int line, const std::string& expr,
                              const std::string& detail);

template <typename A, typename B, typename... Args>
[[noreturn]] void CheckOpFailed(const char* file, int line, const char* expr, const A& a,
                                const B& b, const Args&... args) {
  CheckFailed(file, line, expr, StrCat("(", a, " vs ", b, ") ", args...));
}

}  // namespace asgd::internal

#define ASGD_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) [[unlikely]] {                                                \
      ::asgd::internal::CheckFailed(__FILE__, __LINE__, #cond,                 \
                                    ::asgd::internal::StrCat("" __VA_OPT__(, ) \
                                                                 __VA_ARGS__)); \
    }                                                                          \
  } while (0)

#define ASGD_CHECK_OP_(op, a, b, ...)                                                     \
  do {                                                                                    \
    const auto& asgd_check_a_ = (a);                                                      \
    const auto& asgd_check_b_ = (b);                                                      \
    if (!(asgd_check_a_ op asgd_check_b_)) [[unlikely]] {                                 \
      ::asgd::internal::CheckOpFailed(__FILE__, __LINE__, #a " " #op " " #b, asgd_check_a_, \
                                      asgd_check_b_ __VA_OPT__(, ) __VA_ARGS__);          \
    }                                                                                     \
  } while (0)

#define ASGD_CHECK_EQ(a, b, ...) ASGD_CHECK_OP_(==, a, b __VA_OPT__(, ) __VA_ARGS__)
#define ASGD_CHECK_NE(a, b, ...) ASGD_CHECK_OP_(!=, a, b __VA_OPT__(, ) __VA_ARGS__)
#define ASGD_CHECK_LT(a, b, ...) ASGD_CHECK_OP_(<, a, b __VA_OPT__(, ) __VA_ARGS__)
#define ASGD_CHECK_LE(a, b, ...) ASGD_CHECK_OP_(<=, a, b __VA_OPT__(, ) __VA_ARGS__)
#define ASGD_CHECK_GT(a, b, ...) ASGD_CHECK_OP_(>, a, b __VA_OPT__(, ) __VA_ARGS__)
#define ASGD_CHECK_GE(a, b, ...) ASGD_CHECK_OP_(>=, a, b __VA_OPT__(, ) __VA_ARGS__)
