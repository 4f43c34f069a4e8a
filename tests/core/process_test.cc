// ChildProcess (core/process.h): output line by line, exit statuses, environment, errors
// that name the program, and children always ended by PID.
#include "core/process.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/error.h"

namespace asgd {
namespace {

using namespace std::chrono_literals;

ChildOptions Argv(std::vector<std::string> argv) {
  ChildOptions o;
  o.argv = std::move(argv);
  return o;
}

// Drains the child's output until it ends (at most 10 s).
std::vector<std::string> AllLines(ChildProcess& child) {
  std::vector<std::string> lines;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{child.output_fd(), POLLIN, 0};
    if (p.fd < 0) break;
    ::poll(&p, 1, 100);
    if (!child.ReadLines([&](std::string_view l) { lines.emplace_back(l); })) break;
  }
  return lines;
}

TEST(ChildProcess, CapturesBothStreamsLineByLineAndTheExitStatus) {
  auto child = ChildProcess::Start(
      Argv({"/bin/sh", "-c", "echo one; echo two >&2; printf 'no newline'; exit 3"}));
  EXPECT_GT(child->pid(), 0);
  EXPECT_EQ(AllLines(*child), (std::vector<std::string>{"one", "two", "no newline"}));
  EXPECT_EQ(child->Wait(10s), 3);
  EXPECT_FALSE(child->running());
}

TEST(ChildProcess, PassesAndRemovesEnvironmentVariables) {
  ::setenv("ASGD_PROCESS_TEST_GONE", "x", 1);
  ChildOptions o = Argv({"/bin/sh", "-c", "echo \"$ASGD_A-${ASGD_PROCESS_TEST_GONE:-unset}\""});
  o.env = {"ASGD_A=42"};
  o.unset_env = {"ASGD_PROCESS_TEST_GONE"};
  auto child = ChildProcess::Start(o);
  EXPECT_EQ(AllLines(*child), (std::vector<std::string>{"42-unset"}));
  EXPECT_EQ(child->Wait(10s), 0);
  ::unsetenv("ASGD_PROCESS_TEST_GONE");
}

TEST(ChildProcess, AMissingProgramIsAnIoErrorNamingIt) {
  try {
    ChildProcess::Start(Argv({"/nonexistent/asgd-binary"}));
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/asgd-binary"), std::string::npos)
        << e.what();
  }
}

TEST(ChildProcess, TerminateEndsAChildThatIgnoresNothingAndOneThatIgnoresSigterm) {
  auto polite = ChildProcess::Start(Argv({"/bin/sleep", "60"}));
  EXPECT_EQ(polite->Terminate(5s), 128 + SIGTERM);
  auto stubborn = ChildProcess::Start(
      Argv({"/bin/sh", "-c", "trap '' TERM; echo ready; exec sleep 60"}));
  std::string first;
  while (first.empty()) {  // once it printed, the trap is set
    pollfd p{stubborn->output_fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    stubborn->ReadLines([&](std::string_view l) { first = l; });
  }
  const pid_t pid = stubborn->pid();
  EXPECT_EQ(stubborn->Terminate(300ms), 128 + SIGKILL);
  EXPECT_NE(::kill(pid, 0), 0) << "the child is still there";
}

TEST(ChildProcess, DestructorEndsARunningChild) {
  pid_t pid;
  {
    auto child = ChildProcess::Start(Argv({"/bin/sleep", "60"}));
    pid = child->pid();
  }
  EXPECT_NE(::kill(pid, 0), 0) << "the child outlived its ChildProcess";
}

TEST(ChildProcess, SelfExecutableIsThisTestBinary) {
  EXPECT_NE(SelfExecutable().find("core_test"), std::string::npos) << SelfExecutable();
}

}  // namespace
}  // namespace asgd
