#pragma once
// Unwinding a stack snapshot (breakpoint/in_tracee/stack_record.hpp) after the fact, as perf's
// unwind-libdw.c does for `perf record --call-graph dwarf`: libdw's unwinder (dwfl_attach_state
// with callbacks of our own, dwfl_getthread_frames) starts from the snapshot's registers and
// reads the stack from the snapshot's bytes only; the modules' CFI (.eh_frame, .debug_frame)
// comes from their files, as the process's maps placed them when the unwinder was made or
// last refreshed (dwfl caches each module's CFI). No ptrace, no read of the process's memory:
// it runs in any thread, and after the process is gone.
//
// A frame whose return address lies beyond the copied bytes ends the walk: the stack is then
// `truncated` (the copy was too short), never completed by a guess.
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/stack_record.hpp"

struct Dwfl;

namespace probecost {

class SnapshotUnwinder {
 public:
  // Reads the modules of process `pid` from its /proc/PID/maps now.
  SnapshotUnwinder(pid_t pid, unsigned max_depth);
  ~SnapshotUnwinder();
  SnapshotUnwinder(const SnapshotUnwinder&) = delete;
  SnapshotUnwinder& operator=(const SnapshotUnwinder&) = delete;

  struct Stack {
    // The site first, then return addresses, outermost last.
    std::vector<std::uint64_t> ips;
    // The walk met the end of the copy (or a read outside it) before the outermost frame.
    bool truncated = false;
    // Bytes from the snapshot's rsp to the end of the highest word the walk read: what a copy
    // must hold for this stack (less than the copy's length unless truncated).
    std::uint64_t needed = 0;
  };
  Stack unwind(const jump::StackSnapshot& snapshot);
  // The maps again (a library loaded or unloaded since).
  void refresh();
  // Whether `pc` is in a module of the maps as last read.
  bool knows(std::uint64_t pc) const;
  // "fn+0x12 in libfoo.so.1" for a pc (a return address: pass it as is, the lookup takes pc-1
  // when `caller`).
  std::string describe(std::uint64_t pc, bool caller);

  struct Walk;  // the snapshot being walked (stack_unwind.cpp)

 private:
  void report();
  pid_t pid_;
  unsigned max_depth_;
  Dwfl* dwfl_ = nullptr;
  std::unique_ptr<Walk> walk_;  // what the callbacks read: libdw keeps the pointer from attach
};

}  // namespace probecost
