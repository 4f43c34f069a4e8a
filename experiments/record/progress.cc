#include "experiments/record/progress.h"

#include <cstdio>
#include <ostream>

#include <unistd.h>

#include "core/log.h"

namespace asgd::experiments {
namespace {

std::string FormatDuration(double s) {
  if (!(s >= 0) || s > 1e7) return "--:--";
  const auto total = static_cast<long>(s + 0.5);
  char buf[32];
  if (total >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", total / 3600, (total / 60) % 60, total % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld", total / 60, total % 60);
  }
  return buf;
}

}  // namespace

Progress::Progress(bool live, std::ostream& terminal) : live_(live), terminal_(terminal) {}

bool Progress::DecideLive(const std::string& setting) {
  if (setting == "on") return true;
  if (setting == "off") return false;
  return ::isatty(STDERR_FILENO) == 1;
}

std::string Progress::Line(const ProgressState& s) const {
  char buf[256];
  const double eta = (s.epoch > 0 && s.target_epochs > s.epoch)
                         ? s.elapsed_s * (s.target_epochs - s.epoch) / s.epoch
                         : 0.0;
  char acc[32] = "-";
  if (s.test_accuracy >= 0) std::snprintf(acc, sizeof(acc), "%.4f", s.test_accuracy);
  // No training loss exists before the first update.
  char loss[32] = "-";
  if (s.updates > 0) std::snprintf(loss, sizeof(loss), "%.4f", s.train_loss);
  std::snprintf(buf, sizeof(buf),
                "epoch %.2f/%.4g  step %lld  loss %s  test acc %s  %.0f upd/s  ETA %s", s.epoch,
                s.target_epochs, static_cast<long long>(s.updates), loss, acc, s.updates_per_s,
                FormatDuration(eta).c_str());
  return buf;
}

void Progress::Tick(const ProgressState& s) {
  if (!live_) return;
  if (last_draw_s_ >= 0 && s.elapsed_s - last_draw_s_ < 0.25) return;
  last_draw_s_ = s.elapsed_s;
  terminal_ << "\r\033[K" << Line(s) << std::flush;
  drawn_ = true;
}

void Progress::Evaluated(const ProgressState& s, double test_loss) {
  if (live_) {
    last_draw_s_ = -1;
    Tick(s);
    return;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "  test loss %.4f", test_loss);
  ASGD_LOG(kInfo, Line(s), buf);
}

void Progress::Done() {
  if (live_ && drawn_) terminal_ << "\n" << std::flush;
  drawn_ = false;
}

}  // namespace asgd::experiments
