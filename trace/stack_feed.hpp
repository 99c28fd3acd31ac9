#pragma once
// `trace --stacks` on jump probes: a thread of its own reads the stack snapshots the
// trampolines write into the process's call buffer (breakpoint/in_tracee/stack_record.hpp)
// while the process runs, unwinds each (SnapshotUnwinder, libdw over the copied bytes: never in
// the writer, never in the ptrace thread) and keeps one count per distinct stack: memory that
// grows with the distinct stacks, not with the hits, and nothing written to disk.
//
// For `trace`, the writers never wait for it: a snapshot that finds its CPU's ring full is
// dropped and counted (the hit itself is counted by its probe as always). The program's cost
// per hit is the copy, whatever the unwinder's speed; what the unwinder cannot keep up with is
// said, as `lost`. (A spool the writers waited on cost 20 us per hit of 4 KiB, disk speed: see
// docs/stacks.md.) `record --stacks` hands each snapshot's stack on (Options::each) instead of
// counting it, and is lossless as record is: with Options::block a writer that finds no room
// waits for the unwinder (at most the bound, as record's call records wait for the drain).
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "breakpoint/in_tracee/call_buffer.hpp"
#include "trace/trace.hpp"
#include "tracer/symbols/stack_unwind.hpp"

namespace probecost::trace_run {

struct SnapshotCounts {
  std::uint64_t snapshots = 0, unwound = 0, truncated = 0;
  std::map<jump::SnapshotBound, std::uint64_t> not_copied;  // by why
  double unwind_s = 0;                                      // the reader's CPU for them
  // Complete stacks by the bytes they needed (SnapshotUnwinder::Stack::needed), bucket i for
  // up to 256 * i bytes (kNeededBuckets: up to 64 KiB).
  std::vector<std::uint64_t> needed = std::vector<std::uint64_t>(kNeededBuckets, 0);
};

class StackFeed {
 public:
  // Each snapshot and its stack (empty when not copied or not unwound), in the feed's thread,
  // each CPU's in the order they were written.
  using Each = std::function<void(std::uint32_t cpu, const jump::StackSnapshot&,
                                  const SnapshotUnwinder::Stack&)>;
  struct Options {
    unsigned max_depth = 16;
    bool writers_syscall = true;  // else (seccomp) the writers never wait, and we poll
    bool block = false;           // writers with no room wait for us (at most wait_bound_ns)
    long wait_bound_ns = 1'000'000'000;
    Each each;  // set: every snapshot to it, no counts per stack
  };
  // Starts the thread over the process's snapshot buffer; the modules as mapped now.
  StackFeed(jump::CallReader& reader, pid_t pid, const Options& options);
  ~StackFeed();
  StackFeed(const StackFeed&) = delete;
  StackFeed& operator=(const StackFeed&) = delete;

  // A copy of a stopped thread's stack (`record`'s int3 entries: the ptrace thread copies, the
  // feed's thread unwinds): handed to Options::each with cpu == stopped_cpu(), in the order
  // given, at the next pass.
  void add_stopped(const jump::StackSnapshot& s, std::vector<std::uint8_t> bytes);
  std::uint32_t stopped_cpu() const { return reader_.layout().cpus; }
  // A library came or went (the process is stopped at r_brk): a new unwinder reads the maps
  // now, in the caller's thread (later, the process may be gone), and takes the old one's place
  // between two snapshots (the caller waits for at most the one being unwound).
  void refresh();
  // No writer is left: the thread stops, the last snapshots are unwound, and `add(site, ips, n)`
  // is called for every distinct stack (the site first, then return addresses, as
  // StackCollector gives them) and its count.
  template <typename F>
  void finish(F&& add) {
    stop();
    for (const auto& [key, n] : stacks_) add(key.first, key.second, n);
  }
  const SnapshotCounts& counts() const { return counts_; }
  const std::string& error() const { return error_; }

 private:
  void run();
  void stop();
  std::uint64_t pass(bool final);
  void take(std::uint32_t cpu, const std::uint8_t* data, std::size_t bytes);
  void take_one(std::uint32_t cpu, const std::uint8_t* record);
  void take_stopped();

  jump::CallReader& reader_;
  pid_t pid_;
  Options options_;
  std::mutex unwinder_lock_;  // held by the thread for each snapshot, by refresh() to swap
  std::unique_ptr<SnapshotUnwinder> unwinder_;
  std::atomic<bool> stop_{false};
  std::mutex copies_lock_;
  std::vector<std::pair<jump::StackSnapshot, std::vector<std::uint8_t>>>
      copies_;  // add_stopped's, not unwound yet
  std::map<std::pair<std::uint64_t, std::vector<std::uint64_t>>, std::uint64_t> stacks_;
  SnapshotCounts counts_;
  std::string error_;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace probecost::trace_run
