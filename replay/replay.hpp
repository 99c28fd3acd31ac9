#pragma once
// `probecost replay`: a recording's calls as `uftrace replay` shows them (each thread's calls
// nested, with durations, arguments and results) and as `uftrace report` sums them up (per
// function: calls, total and self time, mean, min, percentiles, max; also per thread).
#include <climits>
#include <cstdint>
#include <iosfwd>
#include <set>
#include <string>
#include <vector>

#include "replay/calls.hpp"

namespace probecost::replay {

struct Filter {
  std::set<std::int32_t> tids;         // empty: every thread
  std::vector<std::string> functions;  // empty: all; else these and the calls they make
  std::int64_t from_ns = 0;            // calls that start in [from, to), from the first call
  std::int64_t to_ns = INT64_MAX;
  int max_depth = INT_MAX;  // the tree: calls at most this deep (1: the outermost only)

  bool thread(std::int32_t tid) const { return tids.empty() || tids.count(tid); }
  bool in_range(const Collected& rec, const Stored& c) const {
    std::int64_t at = c.start_ns - rec.first_ns();
    return at >= from_ns && at < to_ns;
  }
  // Whether `name` is one of functions: the whole name, or the name before its signature
  // ("middle" for "middle(long)").
  bool named(const std::string& name) const;
};

// The tree, thread after thread.
void print_tree(std::ostream& out, const Collected& rec, const Filter& filter);

// The report: one row per function, by total time; then one table per thread if per_thread.
void print_report(std::ostream& out, const Collected& rec, const Filter& filter, bool per_thread);
// The same as JSON, with every time in ns.
void print_report_json(std::ostream& out, const Collected& rec, const Filter& filter);

// 1234 -> "1.234 us", as uftrace prints durations.
std::string duration_text(std::int64_t ns);
// A register value as replay shows it: decimal when small, hex when large (a pointer, a mask).
std::string value_text(std::uint64_t v);

}  // namespace probecost::replay
