#include "tracer/os/proc_files.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <time.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

namespace probecost {

std::string stat_field(pid_t pid, int n) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');  // comm may contain spaces and parentheses
  if (close == std::string::npos) return {};
  std::istringstream rest(stat.substr(close + 2));
  std::string f;
  for (int i = 3; i <= n && rest >> f; ++i) {
  }
  return f;
}

double process_cpu_seconds(pid_t pid) {
  clockid_t clock;
  timespec ts;
  if (::clock_getcpuclockid(pid, &clock) != 0 || ::clock_gettime(clock, &ts) != 0) return -1;
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

double children_cpu_seconds() {
  rusage ru;
  ::getrusage(RUSAGE_CHILDREN, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

pid_t tgid_of(pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Tgid:", 0) == 0) return static_cast<pid_t>(std::stoi(line.substr(5)));
  }
  return 0;
}

std::vector<pid_t> task_ids(pid_t pid) {
  std::vector<pid_t> tids;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') tids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
    }
    ::closedir(d);
  }
  return tids;
}

}  // namespace probecost
