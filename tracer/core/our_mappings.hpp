#pragma once
// What probecost maps in a traced process for its jump probes and call records (trampoline
// areas, the call buffer), and taking it out again when it lets go, so that a process traced
// and recorded again and again keeps the memory and the mappings it had (issue 23, item 3).
//
// At detach (every thread stopped, every patch out, every thread moved out of the relocated
// copies: tracer/core/copy_exits.hpp, and each thread caught in a trampoline's own code stepped out
// of it: tracer/core/process_run_out.cpp):
// - A jump area is unmapped, by a munmap the process runs, when no thread can be in its code:
//   no stopped thread's RIP is inside it, nor the RIP any signal frame on a thread's stack will
//   return to (the check the jumps make before they go in), and no thread is elsewhere than in
//   a ptrace-stop (in vfork(), say). Nothing else can lead there: the patches are out, no
//   relocated instruction is a call, and record's exits are patched in place (no return
//   address is rewritten), so no return address points into a trampoline.
// - Before that, each thread whose struct rseq still points (rseq_cs) at a descriptor in an
//   area that goes has it cleared. The trampolines leave it set when they leave their
//   sequence, as every rseq user does; the kernel reads it at the thread's next preemption or
//   signal and, the descriptor no longer mapped, kills the thread with SIGSEGV. It clears it
//   itself whenever the thread is outside the sequence, so clearing it changes nothing else.
// - The call buffer is written by the record trampolines alone: unmapped when every jump area
//   of this probecost is. If one stays (a thread was in it), the buffer stays mapped, and its
//   rings' pages are freed once the last records are read (JumpProbes: a hole punched in the
//   memfd through our own mapping, no system call in the process): a trampoline that writes
//   after that faults one page in again, and nothing else changes for it.
// - Each mapping is checked against /proc/PID/maps first: taken out only if every mapping in
//   its range is still the memfd we made (its name and inode), never the program's memory.
// `probecost restore` hands the areas and buffers a killed probecost left to the same release,
// and so does the next attach for those a detach kept (reclaim_left_areas, restore/restore.hpp).
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/address.hpp"

namespace probecost {

class TracedProcess;

struct OurMapping {
  enum class Kind { JumpArea, CallBuffer, TrapArea, SemaphoreTable, ScratchPage, WarmPage };
  Kind kind = Kind::JumpArea;
  RuntimeAddr start;
  std::uint64_t size = 0;
  std::uint64_t inode =
      0;  // of its memfd, as /proc/PID/maps shows it (0: the trap area's anonymous memory)
  pid_t tracer_pid = 0;  // the probecost its header names (0: this one)
  std::string describe() const;
};

class OurMappings {
 public:
  void add(const OurMapping& m) { list_.push_back(m); }
  // Unmapped already (an area whose jumps were all refused), or never to be touched.
  void forget(RuntimeAddr start);
  // The address space went away (exec, exit): nothing to take out.
  void forget_all() { list_.clear(); }
  bool holds(RuntimeAddr start) const;
  // Why thread `tid`, inside a jump area, could not be brought out of it (process_run_out.cpp):
  // said with the area the next release() keeps for it.
  void note_stuck(pid_t tid, std::string why) { stuck_[tid] = std::move(why); }
  const std::vector<OurMapping>& list() const { return list_; }

  // Takes out what no thread can be in, with every thread of `proc` stopped; what stays is
  // kept in list() and said in notes(). Never throws (a thread may vanish at any call).
  void release(TracedProcess& proc);
  // What the last release() unmapped and kept, for the user.
  const std::vector<std::string>& notes() const { return notes_; }
  std::uint64_t unmapped_bytes() const { return unmapped_bytes_; }

 private:
  std::vector<OurMapping> list_;
  std::map<pid_t, std::string> stuck_;
  std::vector<std::string> notes_;
  std::uint64_t unmapped_bytes_ = 0;
};

}  // namespace probecost
