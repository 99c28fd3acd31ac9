#include "common/status_line.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>

#include "common/tsc.hpp"

namespace probecost {

namespace {

void write_stderr(const std::string& s) {
  for (std::size_t done = 0; done < s.size();) {
    ssize_t n = ::write(STDERR_FILENO, s.data() + done, s.size() - done);
    if (n <= 0) return;  // EINTR or a closed terminal: a status line is not worth a retry loop
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

bool stderr_is_terminal() {
  return ::isatty(STDERR_FILENO) == 1;
}

StatusLine::StatusLine(std::function<std::string(double)> text, double first_s)
    : text_(std::move(text)), first_s_(first_s) {
  // Every signal blocked in the thread (it inherits the mask it is made with): a SIGINT or a
  // SIGCHLD goes to the threads that wait for them, and interrupts their waits.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &old);
  thread_ = std::thread([this] { run(); });
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void StatusLine::run() {
  ::pthread_setname_np(::pthread_self(), "probecost-status");
  double t0 = static_cast<double>(tsc::clock_ns(CLOCK_MONOTONIC)) * 1e-9;
  double next = first_s_;
  std::unique_lock lock(mutex_);
  for (;;) {
    double now = static_cast<double>(tsc::clock_ns(CLOCK_MONOTONIC)) * 1e-9 - t0;
    if (wake_.wait_for(lock, std::chrono::duration<double>(next - now), [this] { return stop_; }))
      break;
    now = static_cast<double>(tsc::clock_ns(CLOCK_MONOTONIC)) * 1e-9 - t0;
    write_stderr("\r\033[K" + text_(now));
    drawn_ = true;
    next += 1.0;
  }
  if (drawn_) write_stderr("\r\033[K");
}

void StatusLine::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace probecost
