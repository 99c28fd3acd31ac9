#pragma once
// The summary of a recording, per probe: calls, how they ended, latency percentiles and a log2
// histogram. Printed as funclatency and `uftrace report` print theirs (a table, then bpftrace
// hist() blocks), and as JSON (--summary-json).
//
// calls = returns + unwound + unmatched + (entries still open: none after finish()).
// Latency is CLOCK_MONOTONIC time from entry to return on the thread, for calls that returned.
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "record/histogram.hpp"
#include "record/output.hpp"

namespace probecost::record {

struct ProbeSummary {
  std::uint64_t calls = 0;           // entries
  std::uint64_t returns = 0;         // entries closed by their exit
  std::uint64_t unwound = 0;         // entries closed by an unwound event
  std::uint64_t unmatched = 0;       // entries never closed (Unmatched)
  std::uint64_t open_at_end = 0;     // of which still open when the recording ended
  std::uint64_t orphan_exits = 0;    // exits without an entry
  std::uint64_t events_written = 0;  // entry, exit and unwound events handed to the writer
  std::uint64_t events_lost = 0;     // records the tracer lost, known to be this probe's
  std::uint64_t calls_lost = 0;      // of them entries: calls not in `calls`
  std::uint64_t returns_lost = 0;    // of them exits (a call whose entry was kept: unmatched)
  // Its exits as planned, and those that are tail calls (a jmp out): a call that leaves by one
  // is timed to the jump, without the callee's time (strtold: its 10 ns are the wrapper's).
  std::uint32_t exits = 0, tail_exits = 0;
  LatencyHistogram latency;
  // A USDT marker: its hits; an entry marker's calls are `returns`, its entries never returned
  // `unmatched`; a return marker's returns that closed a call `closed`, the others
  // `orphan_exits`.
  std::uint64_t hits = 0, closed = 0;
};

// The markers of one PROVIDER:NAME, its sites summed.
struct MarkerSummary {
  std::string marker;  // "python:function__entry"
  MarkerRole role = MarkerRole::instant;
  std::uint64_t hits = 0;
  std::uint64_t calls = 0;       // entry: closed by a return; return: closed an entry
  std::uint64_t unbalanced = 0;  // entry: never returned; return: no open entry
  std::size_t sites = 0;
};

class Summary : public Output {
 public:
  explicit Summary(const RunInfo& run);

  void event(const Event& e) override;
  void call(const Event& entry, const Event& end) override;
  void unmatched(const Event& entry, Unmatched why) override;
  void orphan(const Event& end) override;
  void lost(const Lost& l) override;
  // Probe i's exits, `tail` of them tail calls (its row is marked).
  void exits(std::uint32_t i, std::uint32_t all, std::uint32_t tail);

  const ProbeSummary& probe(std::uint32_t i) const { return probes_.at(i); }
  std::vector<MarkerSummary> markers() const;
  std::uint64_t lost_unattributed() const { return lost_any_; }

  // The table and one histogram per probe that has latencies.
  void print(std::ostream& out) const;
  nlohmann::json json() const;
  // json() as --summary-json writes it: indented, a line of its own.
  std::string json_text() const;
  // Throws Error when the file cannot be written.
  void write_json(const std::string& path) const;

 private:
  std::string label(std::size_t i) const;
  void print_markers(std::ostream& out) const;
  RunInfo run_;
  tsc::Clock clock_;
  std::vector<ProbeSummary> probes_;
  std::uint64_t lost_any_ = 0;
};

// bpftrace hist()'s text for log2 bucket counts (LatencyHistogram::log2_counts): one row per
// bucket from the first to the last non-empty one, "[4, 8)            12 |@@@@   |".
std::string log2_hist_text(const std::vector<std::uint64_t>& counts);

}  // namespace probecost::record
