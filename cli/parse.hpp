#pragma once
// Option parsing shared by the subcommands.
#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "breakpoint/int3/step_over_choice.hpp"

namespace probecost::cli {

// Parses `args` against `desc`. Every token must be an option or an option's value: a stray
// positional argument is a UsageError, as is an unknown option.
boost::program_options::variables_map parse_options(
    const std::vector<std::string>& args, const boost::program_options::options_description& desc,
    const std::string& cmd);

// A whole decimal number >= `min` (and <= `max`), as typed: "-1", "1.5", "" and "7x" are
// UsageErrors naming the option. (Boost's unsigned parsing would turn "-1" into 4294967295.)
std::uint64_t parse_count(const std::string& option, const std::string& text, std::uint64_t min,
                          std::uint64_t max = UINT32_MAX);

// A size in bytes with an optional unit, as perf -m and lttng --subbuf-size take it: "4M",
// "512K", "1G", "65536" (K, M, G: binary multiples; "KiB", "MB" and lower case too), from `min`
// to `max` bytes, rounded up to a power of two. Else a UsageError naming `option` and the bounds.
std::uint64_t parse_buffer_size(const std::string& option, const std::string& text,
                                std::uint64_t min, std::uint64_t max);

// Bounds that keep figures meaningful and timers finite ("--duration 1e20" would overflow the
// deadline and run for ever; "--cost 1e30us" print 40-digit shares of a CPU).
constexpr double kMinSeconds = 0.001;
constexpr double kMaxSeconds = 30 * 24 * 3600.0;  // 30 days
constexpr double kMinCostNs = 0.001;
constexpr double kMaxCostNs = 1e9;  // 1 s per event
constexpr double kMinRate = 0.001;
constexpr double kMaxRate = 1e10;  // 10G events per second

// A time in seconds from kMinSeconds to kMaxSeconds: a decimal number of seconds ("0.5", "2",
// "1e3") or one with a unit ("500ms", "1s", "2m", "1h", also "us", "min"). Else a UsageError
// naming `option` and the bounds.
double parse_seconds(const std::string& option, const std::string& text);
// A time from a start, >= 0, in ns: a number with a unit ("500ms", "2.5s", "100us", "3m",
// "250ns"; also "min", "h") or a bare number of seconds. Else a UsageError naming `option`.
std::int64_t parse_elapsed_ns(const std::string& option, const std::string& text);
// A cost per event with its unit (parse_duration_ns: "2.01us"), from kMinCostNs to kMaxCostNs.
double parse_cost_ns(const std::string& text);
// Events per second (parse_rate: "750k"), from kMinRate to kMaxRate.
double parse_event_rate(const std::string& text);

// --step-over: "singlestep", "emulate", "outline" or "auto"; UsageError for anything else.
StepOverChoice parse_step_over(const std::string& text);

}  // namespace probecost::cli
