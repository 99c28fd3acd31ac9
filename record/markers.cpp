#include "record/markers.hpp"

#include <algorithm>
#include <map>
#include <sstream>

namespace probecost::record {

namespace {

constexpr const char* kEntry = "__entry";
constexpr const char* kReturn = "__return";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// CPython's names for its markers' arguments (Doc/howto/instrumentation.rst).
std::vector<std::string> python_names(const std::string& name) {
  if (name == "function__entry" || name == "function__return" || name == "line")
    return {"file", "name", "line"};
  if (name == "gc__start") return {"generation"};
  if (name == "gc__done") return {"collected"};
  if (name == "import__find__load__start") return {"module"};
  if (name == "import__find__load__done") return {"module", "found"};
  if (name == "audit") return {"event", "args"};
  return {};
}

std::uint64_t thread_key(std::int32_t pid, std::int32_t tid) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(pid)) << 32 |
         static_cast<std::uint32_t>(tid);
}

}  // namespace

std::vector<MarkerArg> marker_args(const std::string& provider, const std::string& name,
                                   const std::string& specs) {
  std::vector<std::string> names =
      provider == "python" ? python_names(name) : std::vector<std::string>{};
  std::vector<MarkerArg> out;
  std::istringstream in(specs);
  for (std::string spec; in >> spec && out.size() < static_cast<std::size_t>(kMaxArgs);) {
    MarkerArg a;
    std::size_t i = out.size();
    a.name = i < names.size() ? names[i] : "arg" + std::to_string(i);
    a.text = spec.rfind("8@", 0) == 0;  // unsigned 8 bytes: what <sys/sdt.h> gives a pointer
    out.push_back(a);
  }
  return out;
}

const char* marker_role_name(MarkerRole role) {
  return kMarkerRoleNames.name(role);
}

std::string marker_pair(const ProbeInfo& p) {
  if (ends_with(p.function, kEntry)) return p.function.substr(0, p.function.size() - 7);
  if (ends_with(p.function, kReturn)) return p.function.substr(0, p.function.size() - 8);
  return "";
}

void assign_marker_roles(std::vector<ProbeInfo>& probes) {
  std::map<std::string, int> has;  // pair -> 1: an entry recorded, 2: a return, 3: both
  for (const auto& p : probes) {
    if (p.marker == MarkerRole::none) continue;
    std::string pair = marker_pair(p);
    if (!pair.empty()) has[pair] |= ends_with(p.function, kEntry) ? 1 : 2;
  }
  for (auto& p : probes) {
    if (p.marker == MarkerRole::none) continue;
    std::string pair = marker_pair(p);
    bool both = !pair.empty() && has[pair] == 3;
    p.marker = !both                           ? MarkerRole::instant
               : ends_with(p.function, kEntry) ? MarkerRole::entry
                                               : MarkerRole::exit;
  }
}

int marker_name_arg(const ProbeInfo& p) {
  const auto& a = p.marker_args;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].name == "name" && a[i].text) return static_cast<int>(i);
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].text) return static_cast<int>(i);
  return -1;
}

MarkerPairing::MarkerPairing(const RunInfo& run, Output& out) : out_(out) {
  std::map<std::string, int> pairs;
  for (const auto& p : run.probes) {
    role_.push_back(p.marker);
    int pair = -1;
    if (p.marker == MarkerRole::entry || p.marker == MarkerRole::exit)
      pair = pairs.try_emplace(marker_pair(p), static_cast<int>(pairs.size())).first->second;
    pair_.push_back(pair);
    std::uint8_t text = 0;
    for (std::size_t i = 0; i < p.marker_args.size(); ++i)
      if (p.marker_args[i].text) text |= static_cast<std::uint8_t>(1u << i);
    text_.push_back(text);
  }
}

// The string arguments both markers have are the same strings (interned: the same ids).
bool MarkerPairing::same_key(const Event& entry, const Event& ret) const {
  if (pair_[entry.probe] != pair_[ret.probe]) return false;
  std::uint8_t both = entry.text & ret.text & text_[entry.probe] & text_[ret.probe];
  for (int i = 0; i < kMaxArgs; ++i) {
    auto k = static_cast<std::size_t>(i);
    if (both & (1u << i) && entry.args[k] != ret.args[k]) return false;
  }
  return true;
}

void MarkerPairing::close(std::vector<Event>& open, const Event& ret) {
  for (std::size_t i = open.size(); i-- > 0;) {
    if (!same_key(open[i], ret)) continue;
    // Entries pushed after it were left without their return.
    for (std::size_t j = open.size(); j-- > i + 1;) out_.unmatched(open[j], Unmatched::skipped);
    out_.call(open[i], ret);
    open.resize(i);
    return;
  }
  out_.orphan(ret);
}

void MarkerPairing::add(const Event& e) {
  if (e.probe >= role_.size()) return;
  switch (role_[e.probe]) {
    case MarkerRole::none:
      return;
    case MarkerRole::instant:
      out_.instant(e);
      return;
    case MarkerRole::entry: {
      std::vector<Event>& open = open_[thread_key(e.pid, e.tid)];
      if (open.size() >= kMaxDepth) {
        out_.unmatched(open.front(), Unmatched::evicted);
        open.erase(open.begin());
      }
      open.push_back(e);
      return;
    }
    case MarkerRole::exit: {
      auto it = open_.find(thread_key(e.pid, e.tid));
      if (it == open_.end()) return out_.orphan(e);
      close(it->second, e);
      return;
    }
  }
}

void MarkerPairing::thread_exited(std::int32_t pid, std::int32_t tid) {
  auto it = open_.find(thread_key(pid, tid));
  if (it == open_.end()) return;
  for (const Event& e : it->second) out_.unmatched(e, Unmatched::thread_gone);
  open_.erase(it);
}

void MarkerPairing::finish() {
  for (auto& [key, open] : open_)
    for (const Event& e : open) out_.unmatched(e, Unmatched::open_at_end);
  open_.clear();
}

std::size_t MarkerPairing::open_entries() const {
  std::size_t n = 0;
  for (const auto& [key, open] : open_) n += open.size();
  return n;
}

}  // namespace probecost::record
