#pragma once
// `probecost record`'s drain: a thread of its own per call buffer that copies the sub-buffers
// the trampolines have finished, as they are, into a spool file, and frees them for the
// writers. It does no per-record work: the records are decoded, paired and formatted from the
// spool once the process is let go (CallFeed::replay). The ptrace thread never waits for it,
// except for the last copy of a buffer whose writers are all stopped or gone.
//
// The spool is a raw recording, an unlinked file (O_TMPFILE) in the output's directory, so
// nothing is left behind however probecost ends: the records, as call_buffer.hpp lays them out,
// one piece of one CPU's ring after another, each in that CPU's TSC order; where each piece is
// (its CPU, offset and bytes) is kept in probecost's memory (chunks()), which is all the replay
// reads. A piece that holds a whole page starts where its offset and its address agree modulo
// a page, so that its whole pages go to the file with O_DIRECT, straight from the shared
// mapping (spool_writer.hpp); the gap before it, less than a page, is a hole. The file ends
// where its last piece ends.
// It is bounded (kSpoolLimit): past the bound, or when the file system refuses a write (a full
// disk, a quota), the file is cut back to its last whole piece, the drain goes on freeing
// sub-buffers without keeping them (the process runs on as if nothing happened) and counts
// their records lost, and the reason is said at the end; what the spool holds up to there is
// recorded.
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "breakpoint/in_tracee/call_buffer.hpp"
#include "common/fd.hpp"
#include "trace/spool_writer.hpp"

namespace probecost::trace_run {

inline constexpr std::uint64_t kSpoolLimit = 8ull << 30;

// An unlinked file in `dir` (O_TMPFILE, else a name removed at once): gone however we end.
// Error when none can be made.
Fd spool_file(const std::string& dir);

class CallSpool {
 public:
  struct Chunk {
    std::uint32_t cpu = 0;
    std::uint64_t offset = 0, bytes = 0;  // the records' place in the file
  };
  // What the records are (where their probe id is, for those not kept): call records (format
  // 3, call_buffer.hpp) or stack snapshots (the id in bits 48-62 of their third word).
  enum class Kind { Snapshots, Calls };
  // Error when no file can be made in `dir`.
  CallSpool(const std::string& dir, std::uint32_t record_size, std::uint32_t max_ids,
            Kind kind = Kind::Snapshots, std::uint64_t limit = kSpoolLimit,
            SpoolIo io = spool_io_from_env());

  // One CPU's records, straight from the shared mapping (O_DIRECT or write(2)).
  void append(std::uint32_t cpu, const std::uint8_t* data, std::size_t bytes);

  const std::vector<Chunk>& chunks() const { return chunks_; }
  int fd() const { return writer_.fd(); }
  const SpoolWriter& writer() const { return writer_; }
  std::uint32_t record_size() const { return record_size_; }
  std::uint64_t size() const { return size_; }
  // Why records stopped being kept ("" while they are), and those not kept, by probe id:
  // entries (and snapshots), and apart, exits.
  const std::string& error() const { return error_; }
  const std::vector<std::uint64_t>& not_kept() const { return not_kept_; }
  const std::vector<std::uint64_t>& not_kept_exits() const { return not_kept_exits_; }

 private:
  void refuse(const std::uint8_t* data, std::size_t bytes);

  std::string dir_;
  SpoolWriter writer_;
  std::uint32_t record_size_;
  Kind kind_;
  std::uint64_t limit_, size_ = 0;
  std::vector<Chunk> chunks_;
  std::string error_;
  std::vector<std::uint64_t> not_kept_, not_kept_exits_;
};

// What the drains have kept so far, for record's status line on a terminal: each drain adds to
// it after each pass (its own thread), anyone may read it. lost: what the writers counted
// dropped, as the tracee's memory says it (shown, never trusted for anything else).
struct LiveCounts {
  std::atomic<std::uint64_t> records{0}, bytes{0}, lost{0};
};

class CallDrain {
 public:
  // The flush interval: a record in a sub-buffer left partly filled is in the spool within two
  // of them (whole pages at the first flush, the last page's part at the next: call_buffer.cpp).
  // Each flush is a write of its own, ~100-300 us of the drain's CPU on a KVM guest whatever
  // its size (docs/record.md): at 100 ms that was 4.5-5 ns per record of a stream of a few
  // hundred thousand records a second; a sub-buffer that fills within the interval is never
  // flushed.
  static constexpr long kFlushNs = 1'000'000'000;
  struct Options {
    bool block = true;                   // writers with no room wait for us (else they drop)
    long wait_bound_ns = 1'000'000'000;  // for at most this long
    long flush_ns = kFlushNs;            // a sub-buffer left partly filled is read after this
    // The writers may make system calls: they wake us (FUTEX_WAKE) and, with `block`, wait.
    // Off for a process under seccomp, whose filter could kill on them: then we never sleep
    // where a writer would wake us, but poll every kPollNs, and no writer waits.
    bool writers_syscall = true;
    LiveCounts* live = nullptr;  // added to after each pass, when given
  };
  static constexpr long kPollNs = 1'000'000;
  // Starts the thread. `reader` and `spool` outlive it.
  CallDrain(jump::CallReader& reader, CallSpool& spool, const Options& options);
  ~CallDrain();
  CallDrain(const CallDrain&) = delete;
  CallDrain& operator=(const CallDrain&) = delete;

  // No writer is left (every thread stopped or gone): the thread stops, and everything up to
  // each head is copied. Idempotent.
  void finish();

  double cpu_s() const { return cpu_s_; }  // the thread's CPU time, once finished
  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t passes() const { return passes_; }
  const std::string& error() const { return error_; }  // the buffer could not be read

 private:
  void run();
  void idle(std::uint32_t seen);
  std::uint64_t pass(bool final);
  void publish(std::uint64_t bytes);

  jump::CallReader& reader_;
  CallSpool& spool_;
  Options options_;
  std::atomic<bool> stop_{false};
  double cpu_s_ = 0;
  std::uint64_t bytes_ = 0, passes_ = 0, lost_seen_ = 0;
  std::string error_;
  bool finished_ = false;
  std::thread thread_;
};

}  // namespace probecost::trace_run
