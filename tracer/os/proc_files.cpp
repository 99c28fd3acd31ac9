#include "tracer/os/proc_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <string_view>
#include <vector>

#include "common/fd.hpp"

namespace probecost {

std::string proc_text(pid_t pid, const char* file) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + file;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return {};
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

long status_number(const std::string& status, const char* key) {
  std::string_view k(key);
  for (std::size_t at = 0; at < status.size();) {
    std::size_t end = std::min(status.find('\n', at), status.size());
    if (status.compare(at, k.size(), k) == 0)
      return std::strtol(status.c_str() + at + k.size(), nullptr, 10);
    at = end + 1;
  }
  return -1;
}

std::string stat_field(pid_t pid, int n) {
  std::string stat = proc_text(pid, "stat");
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
  long tgid = status_number(proc_text(tid, "status"), "Tgid:");
  return tgid > 0 ? static_cast<pid_t>(tgid) : 0;
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
