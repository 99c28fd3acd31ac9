#pragma once
// `trace --stacks` on jump probes: the stack snapshots the trampolines write into the process's
// call buffer (breakpoint/in_tracee/stack_record.hpp) are copied by a drain thread into a spool
// as they come (record's CallDrain: no per-record work while the process runs), and unwound
// once the image's probes are out (SnapshotUnwinder, libdw over the copied bytes: never in
// the writer, never while the process is held), then counted per distinct stack as the int3
// path counts them.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trace/call_drain.hpp"
#include "tracer/symbols/stack_unwind.hpp"

namespace probecost::trace_run {

struct SnapshotCounts {
  std::uint64_t snapshots = 0, unwound = 0, truncated = 0;
  std::map<jump::SnapshotBound, std::uint64_t> not_copied;  // by why
  double unwind_s = 0;                                      // the reader's CPU for them
};

class StackFeed {
 public:
  // Starts the drain over the process's snapshot buffer; the modules as mapped now.
  StackFeed(jump::CallReader& reader, pid_t pid, unsigned max_depth, bool writers_syscall);
  ~StackFeed();
  StackFeed(const StackFeed&) = delete;
  StackFeed& operator=(const StackFeed&) = delete;

  // A library came or went: the unwinder's modules read again.
  void refresh();
  // No writer is left: the drain's last copy, then each snapshot unwound; `add(site, ips)` for
  // every unwound stack (the site first, then return addresses, as StackCollector gives them).
  template <typename F>
  void finish(F&& add) {
    drain_.finish();
    each_stack([&](std::uint64_t site, const std::vector<std::uint64_t>& ips) { add(site, ips); });
  }
  const SnapshotCounts& counts() const { return counts_; }
  double drain_cpu_s() const { return drain_.cpu_s(); }
  const std::string& error() const;

 private:
  void each_stack(const std::function<void(std::uint64_t, const std::vector<std::uint64_t>&)>& f);
  SnapshotUnwinder unwinder_;
  CallSpool spool_;
  CallDrain drain_;
  SnapshotCounts counts_;
};

}  // namespace probecost::trace_run
