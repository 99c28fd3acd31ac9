#pragma once
// --format ctf: a CTF 1.8 trace directory, which babeltrace2 prints and Trace Compass opens.
//
//   DIR/metadata          TSDL text: the TSC clock (frequency, offset to the epoch), the probes
//                          as an enumeration, the event classes
//   DIR/thread-PID-TID    one binary stream per thread, in packets (LTTng keeps one per CPU;
//                          per thread, each stream is in time order as the events arrive)
//
// Events: probecost:entry {probe, arg0..argN-1[, stack]}, probecost:return {probe, ret},
// probecost:unwound {probe}, probecost:thread_name {name}, each with {pid, tid} as its context
// and the raw TSC as its timestamp. Arguments and return values are signed 64-bit integers.
// A USDT marker probe i is an event class of its own, id kFirstMarkerEvent + i, named by the
// marker ("python:function__entry"): {probe, then its arguments by name (_file, _name, _line:
// babeltrace2 drops the underscore), a string for a text argument (up to kMaxString bytes), a
// signed 64-bit integer for the others}. Its hits are written as they come; replay pairs the
// entry and return markers again as record does (record/markers.hpp).
// With --stacks (env stacks = 1) an entry's `stack` is a string: its frames folded as
// flamegraph.pl reads them ("_start+0x25 in prog;main+0x1d in prog;f+0x0 in prog"), or when
// it has none, why in brackets ("[lost: ...]").
// Records the tracer lost on a thread are its stream's events_discarded, which babeltrace2
// reports.
//
// Bounded memory: each thread's current packet (up to kPacketBytes) is kept, and written when
// full, when its thread exits, at finish(), or (all of them) when the packets held pass
// kHeldBytes. The metadata is written first, so a trace cut short still reads up to its last
// written packet.
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "record/output.hpp"

namespace probecost::record {

using Uuid = std::array<std::uint8_t, 16>;

// The event classes' ids in the metadata and the streams.
enum class CtfEvent : std::uint16_t { entry = 0, exit = 1, unwound = 2, thread_name = 3 };
inline constexpr std::uint16_t kFirstMarkerEvent = 4;

// The TSDL text of a trace of this run.
std::string ctf_metadata(const RunInfo& run, const Uuid& uuid);

class CtfWriter : public Output {
 public:
  static constexpr std::size_t kPacketBytes = 64 * 1024;
  static constexpr std::size_t kHeldBytes = 32 * 1024 * 1024;
  static constexpr std::size_t kMaxString = 1024;
  static constexpr std::size_t kStackTextBytes = 16 * 1024;

  // Creates `dir` (it must not exist, or be empty) and writes its metadata; throws Error when
  // the directory is not empty (the command line refuses that first) or cannot be written.
  CtfWriter(const std::filesystem::path& dir, const RunInfo& run);
  ~CtfWriter() override;
  CtfWriter(const CtfWriter&) = delete;
  CtfWriter& operator=(const CtfWriter&) = delete;

  void event(const Event& e) override;
  void thread_name(std::int32_t pid, std::int32_t tid, const std::string& name,
                   std::uint64_t tsc) override;
  void lost(const Lost& l) override;
  void string(std::uint32_t id, const std::string& text) override;
  void stack(std::uint32_t id, const std::vector<std::string>& frames) override;
  void thread_exited(std::int32_t pid, std::int32_t tid) override;
  void finish() override;

  // Events whose TSC was below their thread's previous one (a TSC not synchronised across
  // CPUs), written at the previous one's time, since a CTF stream must not go back in time.
  std::uint64_t clamped() const { return clamped_; }

 private:
  struct Stream {
    std::int32_t pid = 0, tid = 0;
    std::filesystem::path file;
    std::uint64_t instance = 0;
    std::uint64_t seq = 0;
    std::string content;  // this packet's events
    std::uint64_t first_tsc = 0, last_tsc = 0;
    std::uint64_t discarded = 0, discarded_written = 0;
    // When the last loss was counted: a packet without events ends there.
    std::uint64_t lost_tsc = 0;
  };
  Stream& stream(std::int32_t pid, std::int32_t tid);
  Stream& writable(std::int32_t pid, std::int32_t tid, std::size_t bytes = 256);
  void marker(const Event& e);
  void count_held(std::size_t bytes);
  void begin_event(Stream& s, std::uint16_t id, std::uint64_t tsc);
  void flush(Stream& s);
  void flush_all();

  std::filesystem::path dir_;
  RunInfo run_;
  Uuid uuid_{};
  std::unordered_map<std::uint64_t, Stream> streams_;
  std::unordered_map<std::uint64_t, std::uint32_t> generations_;  // tids seen again
  std::uint64_t instances_ = 0;
  std::size_t held_ = 0;
  std::uint64_t clamped_ = 0;
  std::vector<std::string> strings_;  // Output::string's, cut to kMaxString
  bool finished_ = false;
  std::vector<std::string> folded_;  // by stack id: Event::stack's text
};

}  // namespace probecost::record
