// trace --folded: the stacks of a trace as flamegraph.pl, speedscope and inferno read them.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trace/report.hpp"

namespace probecost {

namespace {

// A frame as a flame graph wants it: its function, so that calls from two places in one function
// do not split its tower. "main+0x1f in prog" -> "main"; a frame with no symbol,
// "libc.so.6+0x2a3f0"
// -> "[libc.so.6]", and one in no module -> "[unknown]" (stackcollapse-perf.pl's forms).
std::string frame_function(const std::string& frame) {
  auto strip_offset = [](const std::string& name) {
    std::size_t plus = name.rfind("+0x");
    if (plus == std::string::npos || plus + 3 == name.size() ||
        name.find_first_not_of("0123456789abcdef", plus + 3) != std::string::npos)
      return name;
    return name.substr(0, plus);
  };
  if (frame.rfind("0x", 0) == 0) return "[unknown]";
  std::size_t in = frame.rfind(" in ");
  if (in != std::string::npos) return strip_offset(frame.substr(0, in));
  std::string module = strip_offset(frame);
  return module == frame ? frame : "[" + module + "]";
}

}  // namespace

// One line per distinct stack, outermost frame first, frames joined by ';', then the count.
// Stacks that become the same by function are merged, the most counted first.
std::string trace_folded_stacks(const TraceReport& r, bool offsets) {
  std::vector<std::pair<std::string, std::uint64_t>> lines;
  std::map<std::string, std::size_t> at;
  for (const ProbeReport& p : r.probes) {
    for (const auto& s : p.stacks) {
      std::string line;
      for (auto f = s.frames.rbegin(); f != s.frames.rend(); ++f) {
        std::string frame = offsets ? *f : frame_function(*f);
        std::replace(frame.begin(), frame.end(), ';', ':');
        if (f != s.frames.rbegin()) line += ';';
        line += frame;
      }
      auto [it, fresh] = at.emplace(line, lines.size());
      if (fresh) lines.emplace_back(line, 0);
      lines[it->second].second += s.count;
    }
  }
  std::stable_sort(lines.begin(), lines.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [line, count] : lines) out += line + " " + std::to_string(count) + "\n";
  return out;
}

}  // namespace probecost
