#pragma once
// The flags probecost's signal handlers set, and the periodic tick that bounds every wait.
//
// Every blocking waitpid of the tracer is interruptible: SIGINT/SIGTERM/SIGHUP (a stop
// request) and the tick's SIGALRM have no SA_RESTART, so waitpid returns EINTR and the waiter
// looks at the flags. The tick (every 100 ms while a Ticker lives) is what makes a wait that
// can no longer be satisfied end: a thread-group leader that turned zombie after we last
// looked, a thread that entered vfork(). It also drives --duration and progress output.
#include <atomic>

namespace probecost {

// Set by the first SIGINT/SIGTERM/SIGHUP: end the run cleanly, restoring the tracee.
std::atomic<bool>& stop_requested();
// Set by a second one: stop waiting for threads, restore what can be restored, and exit.
std::atomic<bool>& force_requested();
// Set by the tick's SIGALRM; whoever handles a tick clears it.
std::atomic<bool>& tick_requested();
// What probecost's handler of SIGINT/SIGTERM/SIGHUP does (async-signal-safe).
void note_stop_signal(int sig);
// How many stop signals have arrived.
int stop_signals_seen();

// While at least one Ticker lives, SIGALRM arrives every 100 ms (ITIMER_REAL).
class Ticker {
 public:
  static constexpr double kPeriod = 0.1;
  // The next tick comes in `seconds` if that is sooner than the period (for a deadline).
  static void next_tick_within(double seconds);
  Ticker();
  ~Ticker();
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;
};

}  // namespace probecost
