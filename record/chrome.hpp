#pragma once
// --format chrome: Chrome's trace-event JSON, which Perfetto UI, chrome://tracing and
// trace_processor open.
//
//   {"displayTimeUnit":"ns","traceEvents":[
//   {"ph":"X","name":"middle(long)","pid":7,"tid":8,"ts":1234.567,"dur":0.051,
//    "args":{"arg0":3,"ret":9}},
//   ...],"stackFrames":{...},"otherData":{...}}
//
// With --stacks (RunInfo::stacks) each entry's stack: "sf":N on its event, N a node of the
// top-level stackFrames dictionary written at the end ({"N":{"name":"main+0x1d in prog",
// "category":"probecost","parent":"M"}}: one node per distinct path from the outermost frame,
// the probed function's own frame the leaf), the Trace Event Format's form that chrome://tracing
// and Perfetto show; an entry without one says why in args.stack ("lost: ...").
//
// One complete ("X") event per call, known when the call returns; events are written in ts order
// all the same (jq, streaming readers and diffs expect it; the format does not ask it): a line
// is held until no call still open on any thread started before it (a call's entry is seen by
// event(), and it is open until call() or unmatched()). At most kMaxHeld lines are held: past
// that the oldest go out anyway, and otherData.ts_ordered says false (a call open across a
// quarter of a million others: a probed main). "M" lines have no ts and go out at once. ts and dur
// are µs with ns decimals, from CLOCK_MONOTONIC (the TSC converted), exact to the ns. A call that
// never returned is a "B" event with no end and args.unmatched saying why; one closed by an unwound
// event is an X with args.unwound = true and no ret; a return without its entry is a thread-scoped
// instant ("i") with its ret. Thread and process names are "M" events, written as they are learnt
// (the last one wins in the viewers).
//
// USDT markers (record/markers.hpp) have "cat":"usdt" and their arguments by name, strings as
// JSON strings: a call of an entry/return pair is an "X" named by the entry's name argument
// ({"ph":"X","cat":"usdt","name":"f",...,"args":{"file":"/tmp/w.py","line":2}}), an entry
// never returned a "B" with args.unmatched, a return without its entry an "i" named by the
// marker with args.entry saying so, and any other marker an "i" named by the marker
// ("python:line").
//
// Argument and return values are registers: written as signed 64-bit integers (so -1 and -ENOMEM
// read right), as JSON numbers when the magnitude is at most 2^53, which every JSON reader holds
// exactly in a double. Beyond that a JavaScript viewer would silently show a rounded number, so
// those are written as hex strings ("0xfedcba9876543210") instead; and so are the values from
// 4 GiB to the top of user space (2^47), where pointers are: "0x7ffd12345678", as a debugger
// shows one, not 140724908873336.
//
// The file is valid JSON whenever the writer is closed: by finish(), or by the destructor on any
// other way out (an exception, an interrupted run). It is written with write(2) from a buffer of
// kBufferBytes, so that a failed write says why (errno) at once.
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "record/output.hpp"

namespace probecost::record {

class ChromeWriter : public Output {
 public:
  static constexpr std::size_t kBufferBytes = 1 << 20;
  static constexpr std::size_t kMaxHeld = 1 << 18;
  // Throws Error when `path` cannot be created.
  ChromeWriter(const std::string& path, const RunInfo& run);
  // Into `fd`, open for writing and not ours (record's temporary file, a FIFO); `name` (the
  // user's path) is what errors say.
  ChromeWriter(int fd, const std::string& name, const RunInfo& run);
  ~ChromeWriter() override;
  ChromeWriter(const ChromeWriter&) = delete;
  ChromeWriter& operator=(const ChromeWriter&) = delete;

  void event(const Event& e) override;
  void call(const Event& entry, const Event& end) override;
  void unmatched(const Event& entry, Unmatched why) override;
  void orphan(const Event& end) override;
  void instant(const Event& e) override;
  void string(std::uint32_t id, const std::string& text) override;
  void thread_name(std::int32_t pid, std::int32_t tid, const std::string& name,
                   std::uint64_t tsc) override;
  void process_name(std::int32_t pid, const std::string& name) override;
  void lost(const Lost& l) override;
  void stack(std::uint32_t id, const std::vector<std::string>& frames) override;
  void finish() override;

 private:
  void start_line();
  void open_event(const char* ph, const Event& e, const std::string* name = nullptr);
  void put_args(const Event& entry, const char* extra);
  const std::string& call_name(const Event& entry) const;
  void put_marker_args(const Event& e, int skip, const char* extra);
  void close_event();
  void close_file();
  void put(const std::string& text);
  void flush();
  void write_line(const std::string& line);
  void close_call(const Event& entry);
  void release(bool all);

  std::string path_;
  int fd_ = -1;
  bool own_fd_ = false;
  std::string out_;  // not written yet
  RunInfo run_;
  tsc::Clock clock_;
  std::vector<std::string> names_;       // per probe, as a JSON string
  std::vector<std::string> call_names_;  // per entry marker, its call's when it has no name
  std::vector<int> name_arg_;            // per probe: marker_name_arg()
  std::vector<std::string> strings_;     // Output::string's, as JSON strings
  std::string line_;
  std::optional<std::uint64_t> line_tsc_;  // the line's ts (none: an "M" line)
  // The entries of calls still open (their TSC), and the lines held until none of them is
  // older: {tsc, sequence} first.
  std::multiset<std::uint64_t> open_;
  struct Held {
    std::uint64_t tsc, seq;
    std::string line;
    bool operator>(const Held& o) const { return tsc != o.tsc ? tsc > o.tsc : seq > o.seq; }
  };
  std::priority_queue<Held, std::vector<Held>, std::greater<>> held_;
  std::uint64_t held_seq_ = 0;
  bool ts_ordered_ = true;
  std::uint64_t events_ = 0;
  std::uint64_t lost_ = 0;
  bool closed_ = false;
  // stackFrames: node i + 1 is {parent node (0: none), its frame}; a stack's id -> its leaf.
  std::vector<std::pair<std::uint32_t, std::string>> frames_;
  std::map<std::pair<std::uint32_t, std::string>, std::uint32_t> nodes_;
  std::vector<std::uint32_t> leaf_;
};

// A register value as the writer puts it in args (see above): "-1", "4096",
// "\"0x7ffd12345678\"", "\"0xfedcba9876543210\"".
std::string chrome_value(std::uint64_t v);
// ns as µs with ns decimals: 1234567 -> "1234.567", -5 -> "-0.005".
std::string chrome_us(std::int64_t ns);

}  // namespace probecost::record
