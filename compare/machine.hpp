#pragma once
#include <array>
#include <string>

namespace probecost {

struct Machine {
  std::string cpu_model;
  std::string kernel;
  double tsc_hz = 0;  // calibrated against CLOCK_MONOTONIC
  int cpus = 0;       // online CPUs
};

Machine describe_machine();

// The load averages over 1, 5 and 15 minutes (/proc/loadavg); -1 each when unreadable.
std::array<double, 3> load_average();
// The CPU time all CPUs have spent busy since boot (/proc/stat: user, nice, system, irq,
// softirq, steal), in seconds.
double busy_cpu_seconds();

// What other processes used of the machine while something ran: the busy time of all CPUs
// minus probecost's own CPU time and its reaped children's (and a watched process's, given at
// the end), as a share of all CPUs' time since construction.
class OthersCpuMeter {
 public:
  OthersCpuMeter();
  double share(double watched_cpu_s = 0) const;

 private:
  double busy0_, ours0_, t0_;
};

}  // namespace probecost
