#include "compare/machine.hpp"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>

#include "common/clock.hpp"
#include "common/tsc.hpp"

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

}  // namespace

Machine describe_machine() {
  Machine m;
  m.cpu_model = cpu_model();
  utsname u;
  if (uname(&u) == 0) m.kernel = std::string(u.sysname) + " " + u.release;
  m.tsc_hz = tsc::calibrate_hz();
  m.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return m;
}

std::array<double, 3> load_average() {
  std::array<double, 3> load = {-1, -1, -1};
  std::ifstream in("/proc/loadavg");
  in >> load[0] >> load[1] >> load[2];
  return load;
}

double busy_cpu_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  return (user + nice + system + irq + softirq + steal) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

namespace {

double our_cpu_seconds() {
  double total = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage ru = {};
    ::getrusage(who, &ru);
    total += ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
             ru.ru_stime.tv_usec / 1e6;
  }
  return total;
}

}  // namespace

OthersCpuMeter::OthersCpuMeter()
    : busy0_(busy_cpu_seconds()), ours0_(our_cpu_seconds()), t0_(monotonic_ns() / 1e9) {}

double OthersCpuMeter::share(double watched_cpu_s) const {
  double all = (monotonic_ns() / 1e9 - t0_) * sysconf(_SC_NPROCESSORS_ONLN);
  double others = (busy_cpu_seconds() - busy0_) - (our_cpu_seconds() - ours0_) - watched_cpu_s;
  return all > 0 ? std::max(0.0, others / all) : 0;
}

}  // namespace probecost
