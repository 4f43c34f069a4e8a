// Progress reporting while a run trains.
//
// On a terminal: one line rewritten in place (epoch, step, loss, accuracy, updates/s,
// ETA). Otherwise: a plain log line per evaluation, so logs stay readable in files.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace asgd::experiments {

struct ProgressState {
  double epoch = 0;
  double target_epochs = 0;
  int64_t updates = 0;
  double train_loss = 0;
  double test_accuracy = -1;  // < 0: not evaluated yet
  double elapsed_s = 0;
  double updates_per_s = 0;
};

class Progress {
 public:
  // live: rewrite one line on `terminal` (stderr on a tty); otherwise log lines.
  Progress(bool live, std::ostream& terminal);
  // Called often; redraws at most a few times per second.
  void Tick(const ProgressState& s);
  // Called after each evaluation; logs a line when not live.
  void Evaluated(const ProgressState& s, double test_loss);
  // Ends the live line.
  void Done();

  // Whether progress=auto|on|off and the stream being a terminal mean "live".
  static bool DecideLive(const std::string& setting);

 private:
  std::string Line(const ProgressState& s) const;

  bool live_;
  std::ostream& terminal_;
  double last_draw_s_ = -1;
  bool drawn_ = false;
};

}  // namespace asgd::experiments
