#include "cli/common.hpp"

#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "cli/parse.hpp"
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

// probecost-inferior is installed next to probecost.
std::string default_inferior() {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "probecost-inferior";
  std::string path(self, n);
  return path.substr(0, path.rfind('/') + 1) + "probecost-inferior";
}

}  // namespace

std::string find_inferior(std::string path) {
  if (path.empty()) path = default_inferior();
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

}  // namespace probecost::cli
