#include "cli/common.hpp"

#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "cli/parse.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"

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

std::function<void(int, int, const std::string&)> progress_for(const std::string& command) {
  if (::isatty(STDERR_FILENO)) return progress_line;
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

}  // namespace probecost::cli
