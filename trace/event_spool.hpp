#pragma once
// `probecost record`'s int3 events (entries and exits no jump could serve, taken by the tracer
// with the thread stopped) on their way to the trace. They arrive in time order, one per trap,
// and wait for the end of the run as the call records do (call_drain.hpp): kBatch of them in
// memory, the rest written, as they are, to an unlinked file (O_TMPFILE) in the spool's
// directory, so that a long int3-heavy recording does not grow probecost's memory without bound.
// Bounded as the call spool is (kSpoolLimit); past the bound, or when the file system refuses a
// write, the events are counted by probe (not_kept) and the reason is said at the end.
#include <cstdint>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "record/events.hpp"
#include "trace/call_drain.hpp"

namespace probecost::trace_run {

class EventSpool {
 public:
  static constexpr std::size_t kBatch = 4096;  // 352 KiB of events
  explicit EventSpool(std::string dir, std::uint64_t limit = kSpoolLimit);

  void push(const record::Event& e);

  // Every event pushed, in order, read back kBatch at a time (memory bounded here too). The
  // spool takes no more pushes once read.
  class Reader {
   public:
    explicit Reader(EventSpool& spool);
    // The next event, or nullptr at the end.
    const record::Event* peek() { return at_ < buf_.size() || refill() ? &buf_[at_] : nullptr; }
    void pop() { ++at_; }

   private:
    bool refill();
    EventSpool& spool_;
    std::vector<record::Event> buf_;
    std::size_t at_ = 0;
    std::uint64_t next_ = 0;  // the next event of the file to read
    bool in_memory_ = false;  // the batch, never written: read where it is
  };
  // Done with: the file's pages go.
  void clear();

  std::uint64_t kept() const { return written_ + batch_.size(); }
  const std::string& error() const { return error_; }
  // By probe: the events not kept, and of them a function's entries and exits.
  const std::vector<std::uint64_t>& not_kept() const { return not_kept_; }
  const std::vector<std::uint64_t>& not_kept_entries() const { return not_kept_entries_; }
  const std::vector<std::uint64_t>& not_kept_exits() const { return not_kept_exits_; }

 private:
  void flush();
  void refuse();
  void count_not_kept(const record::Event& e);

  std::string dir_;
  std::uint64_t limit_;
  Fd fd_;
  std::vector<record::Event> batch_;
  std::uint64_t written_ = 0;  // events in the file
  std::string error_;
  std::vector<std::uint64_t> not_kept_, not_kept_entries_, not_kept_exits_;
};

}  // namespace probecost::trace_run
