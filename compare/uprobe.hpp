#pragma once
// The kernel's uprobe as a mechanism: a counting perf event on the uprobe PMU
// (/sys/bus/event_source/devices/uprobe/type) for the inferior's probe site, no BPF, no tracer.
// The kernel writes its int3 over the site, counts each hit in the event, and then runs the
// displaced instruction itself: emulated, or single-stepped from a copy out of line, or (a
// 5-byte NOP on x86-64 kernels that optimise uprobes) replaced by a call into a trampoline.
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/address.hpp"
#include "compare/mechanism.hpp"
#include "compare/runner.hpp"
#include "tracer/process.hpp"

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

// One run of the inferior with the kernel's uprobe on m.probe_symbol (cfg.handlers events per
// thread). Fills hits, handler_hits and step_over_plan (how the kernel handles the site); sets
// `skipped` when the kernel or the permissions refuse.
void run_uprobe(const Mechanism& m, LaunchSpec spec, const RunConfig& cfg, Sample& s);

// Where the kernel puts a uprobe for `symbol` of a live process: the file mapped there and the
// offset in it.
struct UprobeTarget {
  std::string path;
  std::uint64_t offset = 0;
  RuntimeAddr address;
  std::uint64_t size = 0;
};
UprobeTarget locate_uprobe_target(pid_t pid, const std::string& symbol);

// Counting perf events on the uprobe PMU, closed together. Also the relocation torture suite's
// reference count (tests/torture): what the kernel's own uprobe counts at a site.
class Counters {
 public:
  Counters() = default;
  ~Counters();
  Counters(const Counters&) = delete;
  Counters& operator=(const Counters&) = delete;
  // A counting event for the uprobe at `offset` in the file `path`, bound to thread `tid` (or,
  // with tid -1, to `cpu`): its fd, or -errno of the refusal.
  int open(int type, const std::string& path, std::uint64_t offset, pid_t tid, int cpu = -1);
  static std::uint64_t read(int fd);

 private:
  std::vector<int> fds_;
};

// The threads of a process, now (/proc/PID/task).
std::vector<pid_t> threads_of(pid_t pid);

// `count` uprobes on the inferior's spare sites (never called), system-wide, for as long as
// this lives: "many probes installed elsewhere" for every inferior started meanwhile.
class SpareUprobes {
 public:
  SpareUprobes(const std::string& inferior, unsigned count);
  ~SpareUprobes();  // slow: the kernel waits for grace periods per probe removed
  SpareUprobes(const SpareUprobes&) = delete;
  SpareUprobes& operator=(const SpareUprobes&) = delete;
  const std::string& skipped() const { return skipped_; }  // why there are none
  std::size_t size() const { return fds_.size(); }
  std::uint64_t hits() const;  // must stay 0

 private:
  std::unique_ptr<Counters> counters_;
  std::vector<int> fds_;
  std::string path_;
  std::string skipped_;
};

}  // namespace probecost
