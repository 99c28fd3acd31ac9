#pragma once
// An output of `probecost record` (a trace file writer, the summary): it is told every event as
// it arrives, and every call as the pairing closes it.
#include <cstdint>
#include <string>
#include <vector>

#include "record/events.hpp"

namespace probecost::record {

// Why an entry will never be paired.
enum class Unmatched : std::uint8_t {
  skipped,      // an outer frame of its thread returned first: it was unwound past
  evicted,      // its thread's stack grew past the limit (returns lost): the oldest frame goes
  thread_gone,  // its thread exited with it open
  open_at_end,  // still open when the recording ended
};

class Output {
 public:
  virtual ~Output() = default;

  // Every event, as it arrives, before the pairing sees it.
  virtual void event(const Event&) {}
  // A call closed: `end` is its exit (or unwound) event, on the same thread.
  virtual void call(const Event& /*entry*/, const Event& /*end*/) {}
  // An entry that will never be closed. Never guessed: its end is unknown.
  virtual void unmatched(const Event& /*entry*/, Unmatched) {}
  // An exit or unwound event with no open entry to close (the entry came before the attach, or
  // its record was lost).
  virtual void orphan(const Event& /*end*/) {}
  // A USDT marker that is no part of a pair (record/markers.hpp): a point in time.
  virtual void instant(const Event& /*marker*/) {}
  // The string with id `id` (an argument of markers' events to come; ids from 0, each once).
  virtual void string(std::uint32_t /*id*/, const std::string& /*text*/) {}

  // A thread's name (comm), read at tsc; it can change during the run.
  virtual void thread_name(std::int32_t /*pid*/, std::int32_t /*tid*/, const std::string&,
                           std::uint64_t /*tsc*/) {}
  virtual void process_name(std::int32_t /*pid*/, const std::string&) {}
  virtual void lost(const Lost&) {}
  // The thread is gone; the same tid may come back as a new thread.
  virtual void thread_exited(std::int32_t /*pid*/, std::int32_t /*tid*/) {}
  // Stack `id` (1 and up, each once, before any event names it): its frames, outermost first
  // ("main+0x1d in prog"; the probed function's own frame last).
  virtual void stack(std::uint32_t /*id*/, const std::vector<std::string>& /*frames*/) {}
  // The run is over: write what is buffered and close. Throws Error when a write failed.
  virtual void finish() {}
};

}  // namespace probecost::record
