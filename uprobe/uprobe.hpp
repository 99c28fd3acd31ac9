#pragma once
// The kernel's uprobe, through perf events and nothing else (no BPF, no tracefs, no tracer):
// whether this kernel has the uprobe PMU (/sys/bus/event_source/devices/uprobe/type), where a
// uprobe on a symbol of a live process goes (a file and an offset in it), what the kernel will
// do with the probed instruction, and counting events that read how often it was hit. The
// kernel writes its int3 over the site, counts each hit in the event, and then runs the
// displaced instruction itself: emulated, or single-stepped from a copy out of line, or (a
// 5-byte NOP on x86-64 kernels that optimise uprobes) replaced by a call into a trampoline.
// compare's uprobe mechanisms (compare/uprobe_run.hpp) are built on it.
#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/address.hpp"
#include "common/fd.hpp"

namespace probecost {

// The uprobe PMU's perf type, or why this kernel has none (type < 0).
struct UprobePmu {
  int type = -1;
  std::string unavailable;
};
UprobePmu uprobe_pmu();

// What the kernel does with the probed instruction after the handlers, per
// arch/x86/kernel/uprobes.c: branch_setup_xol_ops (nops, jmp, call, jcc) and push_setup_xol_ops
// (push reg) emulate it on the saved registers; can_optimize (a 5-byte NOP, 6.18+) rewrites the
// site into a call to the uprobe trampoline after the first hit; anything else is
// single-stepped from the [uprobes] page, a second trap per hit.
struct UprobeHandling {
  std::string instruction;  // as decoded
  std::string how;          // one line for the report
  bool single_stepped = false;
  // How the kernel's uprobe changes what the program does, if it does (Linux 6.18): a 5-byte
  // NOP is rewritten into a `call`, which writes its return address at RSP-8, into the red zone
  // where a leaf function may keep live data; a pushf single-stepped out of line pushes the trap
  // flag of the step, and the program's popf later traps (SIGTRAP); some VEX and EVEX
  // instructions single-stepped out of line see zeroed vector registers (`vmovdqu %ymm0,(%rdi)`
  // stores zeros; 6 of the torture corpus's 22 VEX/EVEX sites changed its results).
  std::string harms;
  // Why the kernel's count is not one per execution of the instruction, if it is not: it
  // refuses the instruction (is_prefix_bad: LOCK, or an ES, CS, SS or DS prefix such as CET's
  // `notrack`), or a rep string instruction, single-stepped one iteration at a time from the
  // [uprobes] page, hits again at every iteration.
  std::string count_differs;
};
UprobeHandling uprobe_handling(std::span<const std::uint8_t> bytes, RuntimeAddr at);

// Where the kernel puts a uprobe for `symbol` of a live process: the file mapped there and the
// offset in it.
struct UprobeTarget {
  std::string path;
  std::uint64_t offset = 0;
  RuntimeAddr address;
  std::uint64_t size = 0;
};
UprobeTarget locate_uprobe_target(pid_t pid, const std::string& symbol);

// Counting perf events on the uprobe PMU, closed together.
class UprobeCounters {
 public:
  UprobeCounters() = default;
  UprobeCounters(const UprobeCounters&) = delete;
  UprobeCounters& operator=(const UprobeCounters&) = delete;
  // A counting event for a uprobe at `offset` in the file `path` (kept alive by the caller
  // until this call returns: the kernel copies it), on thread `tid` (-1: every process, then
  // `cpu` >= 0), of PMU type `type`. The fd, or -errno of the refusal.
  int open(int type, const std::string& path, std::uint64_t offset, pid_t tid, int cpu = -1);
  std::size_t size() const { return fds_.size(); }
  // The hits an event has counted, and all of them together.
  static std::uint64_t read(int fd);
  std::uint64_t total() const;

 private:
  std::vector<Fd> fds_;
};

// Why perf_event_open refused a uprobe, from its errno, in one line.
std::string uprobe_refusal(int err);

}  // namespace probecost
