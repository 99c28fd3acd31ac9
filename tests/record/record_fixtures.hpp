#pragma once
// Synthetic event streams for the record/ tests. The clock runs at 1 GHz from TSC 0 = 0 ns
// unless a test says otherwise, so a TSC value reads as ns.
#include <initializer_list>
#include <string>
#include <vector>

#include "record/events.hpp"
#include "record/output.hpp"

namespace probecost::record::testing {

inline RunInfo run_of(std::initializer_list<const char*> functions, int arg_count = 0) {
  RunInfo run;
  for (const char* f : functions) run.probes.push_back({f, f, "target", 0x1000});
  run.arg_count = arg_count;
  run.clock.hz = 1'000'000'000;
  run.clock.anchor = {0, 0};
  run.clock.realtime_offset_ns = 1'700'000'000'000'000'000;
  return run;
}

inline Event entry(std::int32_t tid, std::uint32_t probe, std::uint64_t tsc, std::uint64_t sp = 0,
                   std::array<std::uint64_t, kMaxArgs> args = {}) {
  Event e;
  e.kind = EventKind::entry;
  e.probe = probe;
  e.pid = 100;
  e.tid = tid;
  e.tsc = tsc;
  e.sp = sp;
  e.args = args;
  return e;
}

inline Event exit(std::int32_t tid, std::uint32_t probe, std::uint64_t tsc, std::uint64_t ret = 0,
                  std::uint64_t sp = 0) {
  Event e = entry(tid, probe, tsc, sp);
  e.kind = EventKind::exit;
  e.ret = ret;
  return e;
}

inline Event unwound(std::int32_t tid, std::uint32_t probe, std::uint64_t tsc,
                     std::uint64_t sp = 0) {
  Event e = entry(tid, probe, tsc, sp);
  e.kind = EventKind::unwound;
  return e;
}

// Writes down what the pairing reports, one line each:
//   "call t1 p0 10-20", "call t1 p0 10-20 unwound", "unmatched t1 p0 10 skipped", "orphan t1 p0 30"
class Log : public Output {
 public:
  std::vector<std::string> lines;

  void call(const Event& entry, const Event& end) override {
    lines.push_back("call t" + std::to_string(entry.tid) + " p" + std::to_string(entry.probe) +
                    " " + std::to_string(entry.tsc) + "-" + std::to_string(end.tsc) +
                    (end.kind == EventKind::unwound ? " unwound" : ""));
  }
  void unmatched(const Event& entry, Unmatched why) override {
    static const char* names[] = {"skipped", "evicted", "thread_gone", "open_at_end"};
    lines.push_back("unmatched t" + std::to_string(entry.tid) + " p" + std::to_string(entry.probe) +
                    " " + std::to_string(entry.tsc) + " " + names[static_cast<int>(why)]);
  }
  void orphan(const Event& end) override {
    lines.push_back("orphan t" + std::to_string(end.tid) + " p" + std::to_string(end.probe) + " " +
                    std::to_string(end.tsc));
  }
};

}  // namespace probecost::record::testing
