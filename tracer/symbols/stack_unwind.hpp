#pragma once
// Unwinding a stack snapshot (breakpoint/in_tracee/stack_record.hpp) after the fact, as perf's
// unwind-libdw.c does for `perf record --call-graph dwarf`: libdw's unwinder (dwfl_attach_state
// with callbacks of our own, dwfl_getthread_frames) starts from the snapshot's registers and
// reads the stack from the snapshot's bytes only; the modules' CFI (.eh_frame, .debug_frame)
// comes from their files, as the process's maps placed them when the unwinder was made or
// last refreshed (dwfl caches each module's CFI). No ptrace, no read of the process's memory:
// it runs in any thread, and after the process is gone.
//
// Each frame's unwind rule is looked up once per pc and kept (UnwindRules): a frame whose rule
// is a simple one is unwound without libdw's walk; from the first frame whose rule is not,
// libdw's walk goes on, from that frame's registers. The stacks are the same either way
// (tests/symbols: the cached walk against libdw's alone, over many pcs).
//
// A frame whose return address lies beyond the copied bytes ends the walk: the stack is then
// `truncated` (the copy was too short), never completed by a guess.
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/stack_record.hpp"
#include "tracer/symbols/unwind_rules.hpp"

struct Dwfl;

namespace probecost {

class SnapshotUnwinder {
 public:
  // Reads the modules of process `pid` from its /proc/PID/maps now. `cached_rules` false:
  // libdw's walk alone, every frame (what the cache is tested against).
  SnapshotUnwinder(pid_t pid, unsigned max_depth, bool cached_rules = true);
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

  // Frames unwound by a cached rule; walks that libdw finished (from the frame whose rule
  // was not a simple one).
  struct Use {
    std::uint64_t cached = 0, libdw = 0;
  };
  const Use& use() const { return use_; }
  // The cached rule at `pc` as the walk looks it up (a return address less 1), or nullptr
  // when libdw's walk unwinds that frame.
  const UnwindRule* rule_at(std::uint64_t pc) { return rules_.find(dwfl_, pc); }

 private:
  void report();
  std::optional<int> walk_cached(std::vector<std::uint64_t>& ips);
  pid_t pid_;
  unsigned max_depth_;
  bool cached_rules_;
  UnwindRules rules_;
  Use use_;
  Dwfl* dwfl_ = nullptr;
  std::unique_ptr<Walk> walk_;  // what the callbacks read: libdw keeps the pointer from attach
};

}  // namespace probecost
