#include "cli/parse.hpp"

#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/error.hpp"
#include "compare/model.hpp"

namespace po = boost::program_options;

namespace probecost::cli {

po::variables_map parse_options(const std::vector<std::string>& args,
                                const po::options_description& desc, const std::string& cmd) {
  // Bare words are collected by a hidden positional option, to be named in the error: none of
  // the commands takes one.
  po::options_description hidden;
  hidden.add_options()("stray-argument", po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description positional;
  positional.add("stray-argument", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see 'probecost " + cmd + " --help')");
  }
  if (vm.count("stray-argument")) {
    throw UsageError(
        "unexpected argument '" + vm["stray-argument"].as<std::vector<std::string>>().front() +
        "': every argument is an option or an option's value (see 'probecost " + cmd + " --help')");
  }
  return vm;
}

std::uint64_t parse_count(const std::string& option, const std::string& text, std::uint64_t min,
                          std::uint64_t max) {
  auto bad = [&] {
    std::string range = max >= UINT32_MAX
                            ? ">= " + std::to_string(min)
                            : "from " + std::to_string(min) + " to " + std::to_string(max);
    return UsageError("bad " + option + " '" + text + "': want a whole number " + range);
  };
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) throw bad();
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE || v < min || v > max) throw bad();
  return v;
}

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

}  // namespace

double parse_seconds(const std::string& option, const std::string& text) {
  // A bare number is seconds (as timeout(1) and perf's --duration); a unit may follow, as in
  // bpftrace's interval probes and systemd's time spans: 500ms, 1s, 2m, 1h.
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string unit = end ? end : "";
  double scale = 0;
  for (auto [name, s] : {std::pair{"", 1.0},
                         {"s", 1.0},
                         {"ms", 1e-3},
                         {"us", 1e-6},
                         {"m", 60.0},
                         {"min", 60.0},
                         {"h", 3600.0}}) {
    if (unit == name) scale = s;
  }
  v *= scale;
  if (text.empty() || end == text.c_str() || scale == 0 || !std::isfinite(v) || v < kMinSeconds ||
      v > kMaxSeconds) {
    throw UsageError("bad " + option + " '" + text + "': want seconds from " + number(kMinSeconds) +
                     " to " + number(kMaxSeconds) +
                     " (30 days), or a time with its unit: " + "500ms, 10s, 2m, 1h");
  }
  return v;
}

std::int64_t parse_elapsed_ns(const std::string& option, const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string unit = end ? end : "";
  double scale = 0;
  for (auto [name, s] : {std::pair{"", 1e9},
                         {"s", 1e9},
                         {"ms", 1e6},
                         {"us", 1e3},
                         {"ns", 1.0},
                         {"m", 60e9},
                         {"min", 60e9},
                         {"h", 3600e9}}) {
    if (unit == name) scale = s;
  }
  v *= scale;
  if (text.empty() || end == text.c_str() || scale == 0 || !std::isfinite(v) || v < 0 ||
      v > kMaxSeconds * 1e9)
    throw UsageError("bad " + option + " '" + text +
                     "': want a time from the start, such as 250ns, 100us, 500ms, 2.5s or 2m");
  return static_cast<std::int64_t>(v);
}

namespace {

std::string size_text(std::uint64_t bytes) {
  for (auto [unit, shift] : {std::pair{"G", 30}, {"M", 20}, {"K", 10}}) {
    if (bytes >= (1ull << shift) && bytes % (1ull << shift) == 0)
      return std::to_string(bytes >> shift) + unit;
  }
  return std::to_string(bytes);
}

}  // namespace

std::uint64_t parse_buffer_size(const std::string& option, const std::string& text,
                                std::uint64_t min, std::uint64_t max) {
  auto bad = [&] {
    return UsageError("bad " + option + " '" + text + "': want a size from " + size_text(min) +
                      " to " + size_text(max) + " bytes, such as 4M or 512K");
  };
  std::size_t digits = text.find_first_not_of("0123456789");
  if (digits == 0 || text.empty()) throw bad();
  std::string unit = digits == std::string::npos ? "" : text.substr(digits);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (!unit.empty()) {
    auto at = std::string("KMG").find(unit[0]);
    std::string rest = unit.substr(1);
    if (at == std::string::npos || !(rest.empty() || rest == "B" || rest == "IB")) throw bad();
    shift = 10 * static_cast<int>(at + 1);
  }
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE || v > (max >> shift) || (v << shift) < min) throw bad();
  return std::bit_ceil(static_cast<std::uint64_t>(v) << shift);
}

double parse_cost_ns(const std::string& text) {
  double ns = parse_duration_ns(text);
  if (ns < kMinCostNs || ns > kMaxCostNs) {
    throw UsageError("bad cost '" + text + "': want a time per event from " + number(kMinCostNs) +
                     "ns to 1s");
  }
  return ns;
}

double parse_event_rate(const std::string& text) {
  double rate = parse_rate(text);
  if (rate < kMinRate || rate > kMaxRate) {
    throw UsageError("bad rate '" + text + "': want events per second from " + number(kMinRate) +
                     " to 10G");
  }
  return rate;
}

StepOverChoice parse_step_over(const std::string& text) {
  if (auto choice = kStepOverNames.find(text)) return *choice;
  throw UsageError("unknown step-over strategy '" + text + "' (" + kStepOverNames.known() + ")");
}

}  // namespace probecost::cli
