#pragma once
// Pinning a thread to one CPU (sched_setaffinity).
#include <sched.h>

#include <string>

#include "common/error.hpp"

namespace probecost {

// Pins the calling thread to `cpu`. False (errno set) when the kernel refuses. Only a system
// call: safe in a forked child before its exec.
inline bool pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof set, &set) == 0;
}

// Pins the calling thread while it lives (nothing for cpu < 0), then puts its affinity back.
class PinThread {
 public:
  // `who` names the thread in the error: "pinning the tracer".
  PinThread(int cpu, const std::string& who) {
    if (cpu < 0) return;
    ::sched_getaffinity(0, sizeof old_, &old_);
    if (!pin_to_cpu(cpu))
      throw Error::from_errno("pinning " + who + " to CPU " + std::to_string(cpu));
    pinned_ = true;
  }
  ~PinThread() {
    if (pinned_) ::sched_setaffinity(0, sizeof old_, &old_);
  }
  PinThread(const PinThread&) = delete;
  PinThread& operator=(const PinThread&) = delete;

 private:
  cpu_set_t old_{};
  bool pinned_ = false;
};

}  // namespace probecost
