#include "compare/machine.hpp"

#include <sys/utsname.h>
#include <unistd.h>
#include <x86intrin.h>

#include <ctime>
#include <fstream>

namespace probecost {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

double monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// TSC ticks over 50 ms of CLOCK_MONOTONIC.
double calibrate_tsc_hz() {
  double t0 = monotonic_ns();
  std::uint64_t c0 = __rdtsc();
  timespec nap{0, 50'000'000};
  nanosleep(&nap, nullptr);
  std::uint64_t c1 = __rdtsc();
  double t1 = monotonic_ns();
  return static_cast<double>(c1 - c0) * 1e9 / (t1 - t0);
}

}  // namespace

Machine describe_machine() {
  Machine m;
  m.cpu_model = cpu_model();
  utsname u;
  if (uname(&u) == 0) m.kernel = std::string(u.sysname) + " " + u.release;
  m.tsc_hz = calibrate_tsc_hz();
  m.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return m;
}

std::array<double, 3> load_average() {
  std::array<double, 3> load = {-1, -1, -1};
  std::ifstream in("/proc/loadavg");
  in >> load[0] >> load[1] >> load[2];
  return load;
}

}  // namespace probecost
