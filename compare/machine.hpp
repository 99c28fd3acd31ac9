#pragma once
#include <string>

namespace probecost {

struct Machine {
  std::string cpu_model;
  std::string kernel;
  double tsc_hz = 0;  // calibrated against CLOCK_MONOTONIC
  int cpus = 0;       // online CPUs
};

Machine describe_machine();

}  // namespace probecost
