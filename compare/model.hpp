#pragma once
// The extrapolation of the 2006 mail: CPU share = events per second x CPU time per event.
#include <string>

namespace probecost {

struct Extrapolation {
  double rate_per_s = 0;
  double cpu_percent = 0;            // rate x cost / 1e7 (cost in ns)
  double slowdown = 1;               // 1 + cpu_percent / 100: how much longer the traced work takes
  double saturation_rate_per_s = 0;  // 1e9 / cost: the rate at which probes alone fill a CPU;
                                     // infinity when the cost is not positive
};

Extrapolation extrapolate(double cpu_ns_per_event, double rate_per_s);

// "750000", "750k", "1.2M", "2G", "7.5e5" -> events per second. UsageError on anything else.
double parse_rate(const std::string& text);
// "2.01us", "2.01µs", "220ns", "1ms", "0.5s" -> nanoseconds. The unit is required: a bare
// number is a UsageError.
double parse_duration_ns(const std::string& text);

}  // namespace probecost
