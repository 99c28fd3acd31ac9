#pragma once
// A status line on a terminal, redrawn by a thread of its own at most once a second: the text
// comes from `text()`, which reads counters others keep (atomics), and is written with one
// write(2) to stderr. The thread that does the work never writes it, so a terminal that is
// slow or stopped (^S) never holds that thread up. Cleared when it stops.
//
// Made only when stderr is a terminal: a pipe, a file or a test never gets a byte of it.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace probecost {

class StatusLine {
 public:
  // `text(seconds since the start)`; the first line is drawn after `first_s`.
  explicit StatusLine(std::function<std::string(double)> text, double first_s = 1.0);
  ~StatusLine() { stop(); }
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;

  // The thread ends, and the line it drew is cleared. Idempotent.
  void stop();

 private:
  void run();
  std::function<std::string(double)> text_;
  double first_s_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false, drawn_ = false;
  std::thread thread_;
};

// Whether standard error is a terminal (the one place a status line may go).
bool stderr_is_terminal();

}  // namespace probecost
