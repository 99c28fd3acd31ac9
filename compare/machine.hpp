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

}  // namespace probecost
