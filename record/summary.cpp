#include "record/summary.hpp"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "common/error.hpp"
#include "common/format.hpp"
#include "record/markers.hpp"

namespace probecost::record {

namespace {

// bpftrace's bucket bounds: powers of two with K, M, G, T, P, E for each power of 1024.
std::string power_label(int power) {
  int decade = power / 10;
  std::string label = std::to_string(std::uint64_t{1} << (power - 10 * decade));
  if (decade > 0) label += "\0KMGTPE"[decade];
  return label;
}

std::string bucket_label(std::size_t i) {
  if (i == 0) return "[0]";
  if (i == 1) return "[1]";
  int p = static_cast<int>(i) - 1;
  std::ostringstream label;
  label << '[' << power_label(p) << ", " << power_label(p + 1) << ')';
  return label.str();
}

// The bounds [low, high) of log2 bucket i in ns; the last one's high saturates.
std::pair<std::uint64_t, std::uint64_t> bucket_bounds(std::size_t i) {
  if (i == 0) return {0, 1};
  std::uint64_t low = std::uint64_t{1} << (i - 1);
  return {low, i >= 64 ? UINT64_MAX : low << 1};
}

std::pair<std::size_t, std::size_t> nonempty_range(const std::vector<std::uint64_t>& counts) {
  auto first = std::find_if(counts.begin(), counts.end(), [](auto c) { return c != 0; });
  return {static_cast<std::size_t>(first - counts.begin()), counts.size()};
}

}  // namespace

std::string log2_hist_text(const std::vector<std::uint64_t>& counts) {
  constexpr int kBarWidth = 52;
  std::uint64_t top = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
  if (top == 0) return "";
  std::ostringstream out;
  auto [first, end] = nonempty_range(counts);
  for (std::size_t i = first; i < end; ++i) {
    auto bar = static_cast<std::size_t>(static_cast<double>(counts[i]) / top * kBarWidth);
    out << std::setw(16) << std::left << bucket_label(i) << std::setw(8) << std::right << counts[i]
        << " |" << std::setw(kBarWidth) << std::left << std::string(bar, '@') << "|\n";
  }
  return out.str();
}

Summary::Summary(const RunInfo& run) : run_(run), clock_(run.clock), probes_(run.probes.size()) {}

void Summary::event(const Event& e) {
  ProbeSummary& p = probes_.at(e.probe);
  ++p.events_written;
  if (e.kind == EventKind::entry) ++p.calls;
  if (e.kind == EventKind::marker) ++p.hits;
}

void Summary::call(const Event& entry, const Event& end) {
  ProbeSummary& p = probes_.at(entry.probe);
  if (end.kind == EventKind::marker) ++probes_.at(end.probe).closed;
  if (end.kind == EventKind::unwound) {
    ++p.unwound;
    return;
  }
  ++p.returns;
  std::int64_t ns = clock_.monotonic_ns(end.tsc) - clock_.monotonic_ns(entry.tsc);
  p.latency.add(static_cast<std::uint64_t>(std::max<std::int64_t>(ns, 0)));
}

void Summary::unmatched(const Event& entry, Unmatched why) {
  ProbeSummary& p = probes_.at(entry.probe);
  ++p.unmatched;
  if (why == Unmatched::open_at_end) ++p.open_at_end;
}

void Summary::orphan(const Event& end) {
  ++probes_.at(end.probe).orphan_exits;
}

void Summary::lost(const Lost& l) {
  if (l.probe == kAnyProbe) {
    lost_any_ += l.count;
    return;
  }
  ProbeSummary& p = probes_.at(l.probe);
  p.events_lost += l.count;
  p.calls_lost += l.entries;
  p.returns_lost += l.exits;
}

void Summary::exits(std::uint32_t i, std::uint32_t all, std::uint32_t tail) {
  ProbeSummary& p = probes_.at(i);
  p.exits = std::max(p.exits, all);
  p.tail_exits = std::max(p.tail_exits, tail);
}

// A row's name: the spec as the user gave it, unless another row has the same one (`-b middle`
// on every overload: the demangled function, middle(long) and middle(int); and with
// --all-matches, a function of one name in two modules: its module too).
std::string Summary::label(std::size_t i) const {
  auto count = [&](auto same) {
    return std::count_if(run_.probes.begin(), run_.probes.end(), same);
  };
  const ProbeInfo& p = run_.probes[i];
  if (count([&](const ProbeInfo& q) { return q.spec == p.spec; }) == 1 || p.function.empty())
    return p.spec;
  if (count([&](const ProbeInfo& q) { return q.spec == p.spec && q.function == p.function; }) == 1)
    return p.function;
  return p.function + " in " + p.module;
}

void Summary::print(std::ostream& out) const {
  // A function that ends in a tail call is marked: its latency stops at the jump.
  auto row = [&](std::size_t i) { return label(i) + (probes_[i].tail_exits ? " *" : ""); };
  std::size_t w = 5;
  auto is_marker = [&](std::size_t i) { return run_.probes[i].marker != MarkerRole::none; };
  print_markers(out);
  if (std::all_of(run_.probes.begin(), run_.probes.end(),
                  [](const ProbeInfo& p) { return p.marker != MarkerRole::none; }))
    return;
  for (std::size_t i = 0; i < run_.probes.size(); ++i) w = std::max(w, row(i).size());
  out << std::left << std::setw(static_cast<int>(w)) << "probe" << std::right;
  for (const char* h : {"calls", "returns", "unwound", "unmatched", "lost", "min ns", "p50 ns",
                        "p90 ns", "p99 ns", "max ns"})
    out << std::setw(11) << h;
  out << "\n";
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    if (is_marker(i)) continue;
    const ProbeSummary& p = probes_[i];
    const LatencyHistogram& h = p.latency;
    out << std::left << std::setw(static_cast<int>(w)) << row(i) << std::right;
    for (std::uint64_t v : {p.calls, p.returns, p.unwound, p.unmatched, p.calls_lost, h.min(),
                            h.percentile(50), h.percentile(90), h.percentile(99), h.max()})
      out << std::setw(11) << v;
    out << "\n";
  }
  out << "latency: entry to return on the thread; percentiles within 0.39% (log-linear "
         "histogram), exact below 128 ns\n";
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    const ProbeSummary& p = probes_[i];
    if (p.tail_exits)
      out << "* " << label(i) << ": " << p.tail_exits << " of its " << p.exits
          << (p.exits == 1 ? " exit " : " exits ")
          << (p.tail_exits == 1 ? "is a tail call" : "are tail calls")
          << " (a jmp to another function): a call that leaves by one is timed to "
             "the jump, without the callee's time\n";
  }
  if (lost_any_) out << "lost: " << lost_any_ << " records of unknown probes\n";
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    if (is_marker(i)) continue;
    if (probes_[i].orphan_exits)
      out << label(i) << ": " << probes_[i].orphan_exits
          << " returns without their entry (entered before the recording, or the entry lost)\n";
    if (probes_[i].returns_lost)
      out << label(i) << ": " << probes_[i].returns_lost
          << " returns lost (a call whose entry was kept is unmatched)\n";
    if (probes_[i].latency.count() == 0) continue;
    out << "\n@latency_ns[" << label(i) << "]:\n"
        << log2_hist_text(probes_[i].latency.log2_counts());
  }
}

nlohmann::json Summary::json() const {
  auto probes = nlohmann::json::array();
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    const ProbeSummary& p = probes_[i];
    const LatencyHistogram& h = p.latency;
    auto hist = nlohmann::json::array();
    auto counts = h.log2_counts();
    auto [first, end] = nonempty_range(counts);
    for (std::size_t b = first; b < end; ++b) {
      auto [low, high] = bucket_bounds(b);
      hist.push_back({{"low_ns", low}, {"high_ns", high}, {"count", counts[b]}});
    }
    probes.push_back({{"spec", run_.probes[i].spec},
                      {"function", run_.probes[i].function},
                      {"calls", p.calls},
                      {"returns", p.returns},
                      {"unwound", p.unwound},
                      {"unmatched", p.unmatched},
                      {"open_at_end", p.open_at_end},
                      {"orphan_returns", p.orphan_exits},
                      {"exits", p.exits},
                      {"tail_call_exits", p.tail_exits},
                      {"latency_ns",
                       {{"min", h.min()},
                        {"p50", h.percentile(50)},
                        {"p90", h.percentile(90)},
                        {"p99", h.percentile(99)},
                        {"max", h.max()}}},
                      {"histogram", std::move(hist)},
                      {"events_written", p.events_written},
                      {"events_lost", p.events_lost},
                      {"calls_lost", p.calls_lost},
                      {"returns_lost", p.returns_lost}});
    if (run_.probes[i].marker != MarkerRole::none) {
      probes.back()["marker_hits"] = p.hits;
      probes.back()["marker_closed"] = p.closed;
    }
  }
  auto markers = nlohmann::json::array();
  for (const MarkerSummary& m : this->markers())
    markers.push_back({{"marker", m.marker},
                       {"role", marker_role_name(m.role)},
                       {"hits", m.hits},
                       {"calls", m.calls},
                       {"unbalanced", m.unbalanced},
                       {"sites", m.sites}});
  return {{"probes", std::move(probes)},
          {"markers", std::move(markers)},
          {"events_lost_unattributed", lost_any_}};
}

std::vector<MarkerSummary> Summary::markers() const {
  std::vector<MarkerSummary> out;
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    const ProbeInfo& info = run_.probes[i];
    if (info.marker == MarkerRole::none) continue;
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const MarkerSummary& m) { return m.marker == info.function; });
    if (it == out.end()) it = out.insert(out.end(), MarkerSummary{info.function, info.marker});
    const ProbeSummary& p = probes_[i];
    it->hits += p.hits;
    it->calls += info.marker == MarkerRole::exit ? p.closed : p.returns;
    it->unbalanced += info.marker == MarkerRole::exit ? p.orphan_exits : p.unmatched;
    ++it->sites;
  }
  return out;
}

// One row per marker: its hits, and for a pair's markers the calls they made and those that
// did not balance.
void Summary::print_markers(std::ostream& out) const {
  std::vector<MarkerSummary> ms = markers();
  if (ms.empty()) return;
  std::size_t w = 6;
  for (const auto& m : ms) w = std::max(w, m.marker.size());
  out << std::left << std::setw(static_cast<int>(w)) << "marker" << std::right << std::setw(11)
      << "hits" << std::setw(11) << "calls" << std::setw(11) << "unbalanced"
      << "\n";
  for (const auto& m : ms) {
    out << std::left << std::setw(static_cast<int>(w)) << m.marker << std::right << std::setw(11)
        << m.hits;
    if (m.role == MarkerRole::entry || m.role == MarkerRole::exit)
      out << std::setw(11) << m.calls << std::setw(11) << m.unbalanced
          << (m.role == MarkerRole::entry ? "  (entries never returned)"
                                          : "  (returns without an open entry)");
    out << "\n";
  }
  out << "calls: a return marker paired with its entry marker on the thread (by their string "
         "arguments); unbalanced ones are counted, never made calls\n";
}

std::string Summary::json_text() const {
  return probecost::json_text(json(), 2) + "\n";
}

void Summary::write_json(const std::string& path) const {
  std::ofstream out(path);
  out << json_text();
  out.close();
  if (!out) throw Error::from_errno("cannot write the summary to " + path);
}

}  // namespace probecost::record
