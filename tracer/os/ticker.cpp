#include "tracer/os/ticker.hpp"

#include <signal.h>
#include <sys/time.h>

namespace probecost {

std::atomic<bool>& stop_requested() {
  static std::atomic<bool> flag{false};
  return flag;
}

std::atomic<bool>& force_requested() {
  static std::atomic<bool> flag{false};
  return flag;
}

std::atomic<bool>& tick_requested() {
  static std::atomic<bool> flag{false};
  return flag;
}

namespace {
std::atomic<int> g_stop_signals{0};
}  // namespace

void note_stop_signal(int /*sig*/) {
  ++g_stop_signals;
  if (stop_requested().exchange(true)) force_requested() = true;
}

int stop_signals_seen() {
  return g_stop_signals;
}

namespace {

int g_tickers = 0;  // probecost's tracer is single-threaded
struct sigaction g_old_alarm = {};

void on_alarm(int) {
  tick_requested() = true;
}

}  // namespace

void Ticker::next_tick_within(double seconds) {
  if (g_tickers == 0 || seconds >= kPeriod) return;
  long us = seconds > 0 ? static_cast<long>(seconds * 1e6) : 1;
  itimerval t = {{0, static_cast<long>(kPeriod * 1e6)}, {0, us > 0 ? us : 1}};
  setitimer(ITIMER_REAL, &t, nullptr);
}

Ticker::Ticker() {
  if (g_tickers++ > 0) return;
  struct sigaction sa = {};
  sa.sa_handler = on_alarm;  // no SA_RESTART: a blocked waitpid returns EINTR
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, &g_old_alarm);
  itimerval t = {{0, static_cast<long>(kPeriod * 1e6)}, {0, static_cast<long>(kPeriod * 1e6)}};
  setitimer(ITIMER_REAL, &t, nullptr);
}

Ticker::~Ticker() {
  if (--g_tickers > 0) return;
  itimerval off = {};
  setitimer(ITIMER_REAL, &off, nullptr);
  sigaction(SIGALRM, &g_old_alarm, nullptr);
}

}  // namespace probecost
