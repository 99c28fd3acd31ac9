// `probecost replay --report`: per function (and per thread) what `uftrace report` gives, with
// exact percentiles (each function's durations sorted, nearest rank).
//
// Times count the calls whose duration is known: those that returned and those closed by an
// unwind. Self time is a call's time less that of the recorded calls it made directly.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>

#include "common/format.hpp"
#include "replay/replay.hpp"

namespace probecost::replay {

namespace {

struct Row {
  std::uint64_t calls = 0, returned = 0, unwound = 0, unmatched = 0, orphans = 0;
  std::int64_t total = 0, self = 0;
  std::vector<std::int64_t> durations;

  // Nearest rank: the smallest value with at least p% at or below it (sorted first).
  std::int64_t percentile(double p) const {
    if (durations.empty()) return 0;
    auto n = static_cast<double>(durations.size());
    auto rank = static_cast<std::size_t>(std::max(1.0, std::ceil(p / 100 * n)));
    return durations[std::min(rank, durations.size()) - 1];
  }
  std::int64_t mean() const {
    return durations.empty() ? 0 : total / static_cast<std::int64_t>(durations.size());
  }
};

using Rows = std::map<std::uint32_t, Row>;  // by function

class Summer {
 public:
  Summer(const Filter& f, const Collected& rec, Rows& all, Rows& mine)
      : f_(f), rec_(rec), all_(all), mine_(mine) {}
  void open(const Stored&, int, bool) {}
  void close(const Stored& c, int, std::int64_t child_ns) {
    if (!f_.in_range(rec_, c) || !f_.named(rec_.functions().at(c.function))) return;
    for (Rows* rows : {&all_, &mine_}) add((*rows)[c.function], c, child_ns);
  }

 private:
  static void add(Row& r, const Stored& c, std::int64_t child_ns) {
    if (c.end == End::orphan) {
      ++r.orphans;
      return;
    }
    ++r.calls;
    if (c.end == End::unmatched) {
      ++r.unmatched;
      return;
    }
    ++(c.end == End::returned ? r.returned : r.unwound);
    std::int64_t d = c.end_ns - c.start_ns;
    r.total += d;
    r.self += d - child_ns;
    r.durations.push_back(d);
  }
  const Filter& f_;
  const Collected& rec_;
  Rows &all_, &mine_;
};

struct Sums {
  Rows all;
  std::vector<std::pair<const Thread*, Rows>> threads;
};

Sums sum_up(const Collected& rec, const Filter& f) {
  Sums s;
  for (const auto& [key, t] : rec.threads()) {
    if (!f.thread(t.tid)) continue;
    s.threads.push_back({&t, {}});
    Summer summer(f, rec, s.all, s.threads.back().second);
    walk(t, summer);
  }
  auto sort_rows = [](Rows& rows) {
    for (auto& [fn, r] : rows) std::sort(r.durations.begin(), r.durations.end());
  };
  sort_rows(s.all);
  for (auto& [t, rows] : s.threads) sort_rows(rows);
  return s;
}

// By total time, then by calls, then by name.
std::vector<std::uint32_t> order(const Rows& rows, const Collected& rec) {
  std::vector<std::uint32_t> out;
  for (const auto& [fn, r] : rows) out.push_back(fn);
  std::sort(out.begin(), out.end(), [&](std::uint32_t a, std::uint32_t b) {
    const Row &ra = rows.at(a), &rb = rows.at(b);
    if (ra.total != rb.total) return ra.total > rb.total;
    if (ra.calls != rb.calls) return ra.calls > rb.calls;
    return rec.functions().at(a) < rec.functions().at(b);
  });
  return out;
}

void print_table(std::ostream& out, const Rows& rows, const Collected& rec) {
  char line[256];
  std::snprintf(line, sizeof line, "%10s %12s %12s %12s %12s %12s %12s %12s %12s  %s\n", "calls",
                "total", "self", "mean", "min", "p50", "p90", "p99", "max", "function");
  out << line;
  for (std::uint32_t fn : order(rows, rec)) {
    const Row& r = rows.at(fn);
    auto d = [](std::int64_t ns) { return duration_text(ns); };
    std::int64_t min = r.durations.empty() ? 0 : r.durations.front();
    std::int64_t max = r.durations.empty() ? 0 : r.durations.back();
    std::snprintf(line, sizeof line, "%10llu %12s %12s %12s %12s %12s %12s %12s %12s  ",
                  static_cast<unsigned long long>(r.calls), d(r.total).c_str(), d(r.self).c_str(),
                  d(r.mean()).c_str(), d(min).c_str(), d(r.percentile(50)).c_str(),
                  d(r.percentile(90)).c_str(), d(r.percentile(99)).c_str(), d(max).c_str());
    out << line << rec.functions().at(fn);
    if (r.unwound || r.unmatched || r.orphans)
      out << "  (" << r.unwound << " unwound, " << r.unmatched << " never returned, " << r.orphans
          << " returns without their entry)";
    out << "\n";
  }
}

nlohmann::json rows_json(const Rows& rows, const Collected& rec) {
  auto list = nlohmann::json::array();
  for (std::uint32_t fn : order(rows, rec)) {
    const Row& r = rows.at(fn);
    list.push_back({{"function", rec.functions().at(fn)},
                    {"calls", r.calls},
                    {"returned", r.returned},
                    {"unwound", r.unwound},
                    {"unmatched", r.unmatched},
                    {"orphan_returns", r.orphans},
                    {"total_ns", r.total},
                    {"self_ns", r.self},
                    {"mean_ns", r.mean()},
                    {"min_ns", r.durations.empty() ? 0 : r.durations.front()},
                    {"p50_ns", r.percentile(50)},
                    {"p90_ns", r.percentile(90)},
                    {"p99_ns", r.percentile(99)},
                    {"max_ns", r.durations.empty() ? 0 : r.durations.back()}});
  }
  return list;
}

}  // namespace

void print_report(std::ostream& out, const Collected& rec, const Filter& filter, bool per_thread) {
  Sums s = sum_up(rec, filter);
  print_table(out, s.all, rec);
  if (rec.lost_total())
    out << rec.lost_total() << " records lost by the tracer: the counts above miss their calls\n";
  for (const auto& [name, hits] : rec.markers())
    out << "marker " << name << ": " << hits << " hits (instants)\n";
  if (!per_thread) return;
  for (const auto& [t, rows] : s.threads) {
    if (rows.empty()) continue;
    out << "\n# thread " << t->tid;
    if (!t->name.empty()) out << " (" << t->name << ")";
    out << " of process " << t->pid << "\n";
    print_table(out, rows, rec);
  }
}

void print_report_json(std::ostream& out, const Collected& rec, const Filter& filter) {
  Sums s = sum_up(rec, filter);
  auto threads = nlohmann::json::array();
  for (const auto& [t, rows] : s.threads)
    threads.push_back({{"pid", t->pid},
                       {"tid", t->tid},
                       {"name", t->name},
                       {"records_lost", t->lost},
                       {"functions", rows_json(rows, rec)}});
  nlohmann::json j = {{"format", record::kTraceFormatNames.name(rec.format())},
                      {"records_lost", rec.lost_total()},
                      {"functions", rows_json(s.all, rec)},
                      {"markers", rec.markers()},
                      {"threads", std::move(threads)}};
  out << probecost::json_text(j, 2) << "\n";
}

}  // namespace probecost::replay
