#pragma once
// Reading what `probecost record` wrote: its Chrome JSON (streamed through a SAX parser, never
// held whole) or its CTF directory (packet by packet), as one stream of calls. This is the one
// place that knows record's file formats (record/chrome.hpp, record/ctf.hpp): a change there
// is followed here, and replay's tree and report only see Call.
//
//   struct Mine : replay::Sink { void call(const replay::Call& c) override { ... } };
//   Mine sink;
//   replay::read_recording("t.json", sink);   // or a CTF directory
//
// Calls arrive in no particular order across threads; within a thread, in the order record
// closed them (a call after the calls it made). Times are ns on the recording's own clock
// (Chrome: CLOCK_MONOTONIC; CTF: the epoch, from its clock's offset), the same TSC either way.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "record/format.hpp"

namespace probecost::replay {

inline constexpr int kMaxArgs = 6;

enum class End : std::uint8_t {
  returned,   // closed by its return: ret is rax
  unwound,    // closed by an unwound event (a longjmp or an exception left it); no ret
  unmatched,  // never closed (why says why); its end is unknown, end_ns == start_ns
  orphan,     // a return whose entry is not in the recording; start_ns == end_ns, the return
};

struct Call {
  std::int32_t pid = 0, tid = 0;
  std::uint32_t function = 0;  // Sink::function's index
  End end = End::returned;
  std::int64_t start_ns = 0, end_ns = 0;
  std::uint64_t ret = 0;
  std::array<std::uint64_t, kMaxArgs> args{};  // the first Sink::start's arg_count are valid
  std::string_view why;                        // unmatched: the reason record gave
};

using record::TraceFormat;  // record/format.hpp: the formats record writes

class Sink {
 public:
  virtual ~Sink() = default;
  // Before anything else. arg_count: how many arguments each entry has (record's --args); for
  // Chrome JSON, the most any call has.
  virtual void start(TraceFormat /*format*/) {}
  // A function's name, the first time it appears (before its first call): index 0, 1, ...
  virtual void function(std::uint32_t /*index*/, const std::string& /*name*/) {}
  virtual void arg_count(int /*n*/) {}
  virtual void call(const Call&) = 0;
  // A thread's name, as it was at some point (the last one given is the latest).
  virtual void thread_name(std::int32_t /*pid*/, std::int32_t /*tid*/, const std::string&) {}
  virtual void process_name(std::int32_t /*pid*/, const std::string&) {}
  // A USDT marker's hit that is no part of a call (python:line), by its name.
  virtual void marker(std::int32_t /*pid*/, std::int32_t /*tid*/, const std::string& /*name*/) {}
  // Records the tracer lost (tid 0: not known whose).
  virtual void lost(std::int32_t /*pid*/, std::int32_t /*tid*/, std::uint64_t /*count*/) {}
};

// A recording's path: a directory is CTF, a file Chrome JSON. Throws UsageError when PATH is
// missing or is not a recording of record's (naming PATH and why), Error when it is one but
// cut short or unreadable (naming the byte or the file where it stops).
TraceFormat recording_format(const std::string& path);
void read_recording(const std::string& path, Sink& sink);

void read_chrome(const std::string& path, Sink& sink);
void read_ctf(const std::string& dir, Sink& sink);

}  // namespace probecost::replay
