#include "cli/common.hpp"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "cli/parse.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "trace/trace.hpp"

namespace probecost::cli {

std::vector<double> parse_rates(const std::vector<std::string>& texts) {
  std::vector<double> rates;
  for (const auto& t : texts) rates.push_back(parse_event_rate(t));
  return rates;
}

std::vector<std::string> split_commas(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& s : in) {
    std::stringstream ss(s);
    for (std::string part; std::getline(ss, part, ',');) {
      if (!part.empty()) out.push_back(part);
    }
  }
  return out;
}

namespace {

// The directory probecost runs from, with its final '/' ("" when the kernel will not say).
std::string own_directory() {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  std::string path(self, static_cast<std::size_t>(n));
  return path.substr(0, path.rfind('/') + 1);
}

}  // namespace

std::string find_inferior(std::string path) {
  if (path.empty()) {
    // In the build tree, next to probecost; installed, in libexec (see CMakeLists.txt).
    std::string dir = own_directory();
    std::string beside = dir + "probecost-inferior";
    std::string installed =
        std::filesystem::path(dir + PROBECOST_INFERIOR_FROM_BIN).lexically_normal().string();
    path = ::access(beside.c_str(), X_OK) == 0 || ::access(installed.c_str(), X_OK) != 0
               ? beside
               : installed;
    if (::access(path.c_str(), X_OK) != 0) {
      throw UsageError("the inferior is neither at '" + beside + "' nor at '" + installed +
                       "' (build it, install it, or pass --inferior PATH)");
    }
  }
  if (::access(path.c_str(), X_OK) != 0) {
    throw UsageError("the inferior '" + path +
                     "' is missing or not executable (build it, or pass --inferior PATH)");
  }
  return path;
}

void progress_line(int done, int total, const std::string& what) {
  std::fprintf(stderr, "\r\033[K[%d/%d] %s", done, total, what.c_str());
  if (done == total) std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

void StepLines::start(const std::string& what, int done, int total) {
  finish();
  if (total > 0 && done >= total) return;
  current_ = what;
  // snprintf, not operator+: GCC 12 at -O3 warns of an overlap in "[" + std::to_string(...)
  // that cannot happen (a -Wrestrict false positive inside libstdc++'s string).
  char count[32] = "";
  if (total > 0) std::snprintf(count, sizeof count, "[%d/%d] ", done + 1, total);
  count_ = count;
  started_ = now_s();
  std::fprintf(stderr, "\r\033[K%s%s ...", count_.c_str(), what.c_str());
  std::fflush(stderr);
}

void StepLines::finish() {
  if (current_.empty()) return;
  std::fprintf(stderr, "\r\033[Kprobecost %s: %s%s: %.1f s\n", command_.c_str(), count_.c_str(),
               current_.c_str(), now_s() - started_);
  std::fflush(stderr);
  current_.clear();
}

std::function<void(int, int, const std::string&)> progress_for(const std::string& command,
                                                               bool quiet, bool heartbeat) {
  if (quiet) return nullptr;
  if (::isatty(STDERR_FILENO)) {
    auto lines = std::make_shared<StepLines>(command);
    return
        [lines](int done, int total, const std::string& what) { lines->start(what, done, total); };
  }
  if (!heartbeat) return nullptr;
  constexpr double kEvery = 10;  // seconds between lines
  double start = now_s();
  auto last = std::make_shared<double>(-kEvery);
  return [command, start, last](int done, int total, const std::string& what) {
    double t = now_s() - start;
    if (t - *last < kEvery && done != total) return;
    *last = t;
    std::fprintf(stderr, "probecost %s: [%d/%d] %s (%.0f s)\n", command.c_str(), done, total,
                 what.c_str(), t);
  };
}

bool status_line_allowed(pid_t pid) {
  struct stat err;
  if (!::isatty(STDERR_FILENO) || ::fstat(STDERR_FILENO, &err) != 0) return false;
  for (int fd = 0; fd <= 1; ++fd) {
    struct stat st;
    std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    int r = pid ? ::stat(path.c_str(), &st) : ::fstat(fd, &st);
    if (r == 0 && S_ISCHR(st.st_mode) && st.st_rdev == err.st_rdev) return false;
  }
  return true;
}

void check_probe_kinds(const TraceOptions& opts) {
  if (opts.stacks && opts.via == Via::Jump && !opts.stack_size) {
    throw UsageError(
        "--stacks with --stack-size 0 needs int3 probes: a jump probe never stops the thread "
        "to unwind it, and copies no stack at size 0 (give --stack-size above 0 for a jump "
        "probe's snapshot, or use --via int3)");
  }
  if (opts.usdt_args && opts.via == Via::Jump) {
    throw UsageError(
        "--usdt-args needs int3 probes: a jump probe never stops the thread to read its "
        "arguments (use --via int3, or auto, which uses int3 with --usdt-args)");
  }
  if (opts.events && opts.via == Via::Int3) {
    throw UsageError("--events needs jump probes (--via jump or auto)");
  }
}

}  // namespace probecost::cli
