#include "compare/model.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "common/error.hpp"

namespace probecost {

Extrapolation extrapolate(double cpu_ns_per_event, double rate_per_s) {
  Extrapolation e;
  e.rate_per_s = rate_per_s;
  e.cpu_percent = rate_per_s * cpu_ns_per_event / 1e7;
  e.slowdown = 1 + e.cpu_percent / 100;
  e.saturation_rate_per_s =
      cpu_ns_per_event > 0 ? 1e9 / cpu_ns_per_event : std::numeric_limits<double>::infinity();
  return e;
}

namespace {

// Splits "1.2M" into 1.2 and "M"; false when there is no leading number.
bool split_number(const std::string& text, double& number, std::string& suffix) {
  if (text.empty()) return false;
  char* end = nullptr;
  number = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(number)) return false;
  suffix = end;
  return true;
}

}  // namespace

double parse_rate(const std::string& text) {
  double n;
  std::string suffix;
  double scale = 0;
  if (split_number(text, n, suffix)) {
    if (suffix.empty()) scale = 1;
    if (suffix == "k" || suffix == "K") scale = 1e3;
    if (suffix == "M" || suffix == "m") scale = 1e6;
    if (suffix == "G" || suffix == "g") scale = 1e9;
  }
  // "1e308k" is a finite number times a finite scale, and infinite: refused like any other.
  if (scale == 0 || n <= 0 || !std::isfinite(n * scale)) {
    throw UsageError("bad rate '" + text +
                     "': want events per second > 0, such as 750000, 750k or 1.2M");
  }
  return n * scale;
}

double parse_duration_ns(const std::string& text) {
  double n;
  std::string suffix;
  double scale = 0;
  if (split_number(text, n, suffix)) {
    // No unit is an error, not ns: "-c 2.01 us" splits into "2.01" and a stray "us".
    if (suffix == "ns") scale = 1;
    if (suffix == "us" || suffix == "\u00b5s" || suffix == "\u03bcs") scale = 1e3;
    if (suffix == "ms") scale = 1e6;
    if (suffix == "s") scale = 1e9;
  }
  if (scale == 0 || n <= 0 || !std::isfinite(n * scale)) {
    throw UsageError("bad cost '" + text + "': want a time > 0, such as 220ns, 2.01us or 1ms");
  }
  return n * scale;
}

}  // namespace probecost
