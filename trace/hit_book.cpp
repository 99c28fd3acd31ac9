// HitBook (trace/run.hpp): the hits, threads and stacks of one traced image, kept past its threads.
#include <algorithm>
#include <fstream>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "trace/run.hpp"

namespace probecost::trace_run {

std::string thread_name(pid_t pid, pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/comm");
  std::string name;
  if (!std::getline(in, name)) {
    // A thread of another process that shares the memory: under its own /proc entry.
    std::ifstream own("/proc/" + std::to_string(tid) + "/comm");
    std::getline(own, name);
  }
  return name;
}

void HitBook::add_stack(ProcessSymbols& symbols, std::uint64_t site,
                        const std::vector<std::uint64_t>& ips, std::uint64_t n) {
  name_frames(symbols, ips);
  stacks[site][ips] += n;
}

std::string HitBook::frame_name(const std::vector<std::uint64_t>& ips, std::size_t i) const {
  std::uint64_t ip = i == 0 ? ips[i] : ips[i] - 1;
  auto it = frame_names.find(ip);
  if (it != frame_names.end()) return it->second;
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(ips[i]));
  return b;
}

void HitBook::name_frames(ProcessSymbols& symbols, const std::vector<std::uint64_t>& ips) {
  for (std::size_t i = 0; i < ips.size(); ++i) {
    // Return addresses point after the call: look up ip-1 for the caller's line (frame 0 is
    // the site itself).
    std::uint64_t ip = i == 0 ? ips[i] : ips[i] - 1;
    if (frame_names.count(ip)) continue;
    std::string name = symbols.describe(RuntimeAddr(ip));
    if (name.rfind("0x", 0) == 0) {  // unknown: a library loaded since? look again once
      try {
        symbols.refresh();
        name = symbols.describe(RuntimeAddr(ip));
      } catch (const Error&) {
        // The process is gone (a jump probe's snapshots are unwound after): as it is.
      }
    }
    frame_names[ip] = name;
  }
}

std::vector<StackCount> HitBook::top_stacks(std::uint64_t site) const {
  std::vector<StackCount> out;
  auto it = stacks.find(site);
  if (it == stacks.end()) return out;
  for (const auto& [ips, count] : it->second) {
    StackCount sc;
    sc.count = count;
    for (std::size_t i = 0; i < ips.size(); ++i) {
      sc.frames.push_back(frame_names.at(i == 0 ? ips[i] : ips[i] - 1));
    }
    out.push_back(sc);
  }
  std::sort(out.begin(), out.end(),
            [](const StackCount& a, const StackCount& b) { return a.count > b.count; });
  return out;
}

}  // namespace probecost::trace_run
