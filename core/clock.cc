#include "core/clock.h"

#include <ctime>
#include <thread>

namespace asgd {
namespace {

class SystemClock final : public Clock {
 public:
  SystemClock() : origin_(std::chrono::steady_clock::now()) {}
  Duration Now() const override {
    return std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - origin_);
  }
  void SleepFor(Duration d) override { std::this_thread::sleep_for(d); }

 private:
  std::chrono::steady_clock::time_point origin_;
};

std::string FormatUtc(const char* format) {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::size_t n = std::strftime(buf, sizeof(buf), format, &tm);
  return std::string(buf, n);
}

}  // namespace

std::unique_ptr<Clock> NewSystemClock() { return std::make_unique<SystemClock>(); }

std::string WallTimeIso8601() { return FormatUtc("%Y-%m-%dT%H:%M:%SZ"); }
std::string WallTimeCompact() { return FormatUtc("%Y%m%d-%H%M%S"); }

}  // namespace asgd
