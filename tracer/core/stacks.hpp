#pragma once
// Call stacks of stopped tracee threads with libunwind, walked in probecost over copies of the
// tracee's memory. One address space for the process, with UNW_CACHE_GLOBAL (unwind info parsed
// once, not per hit), and one _UPT handle per thread (libunwind tests/test-ptrace.c) for what
// libunwind-ptrace does from the files (finding a module's unwind tables).
//
// libunwind-ptrace reads every word it needs with PTRACE_PEEKDATA, and every register with
// PTRACE_PEEKUSER: the stack, and the .eh_frame_hdr tables and FDEs, which it reads from the
// process, not the file. A walk of a thread for its signal frames took 3.3 ms of the 13.7 ms an
// attach held a 1-thread program (issue 23 item 7). So the accessors here read the registers
// once (PTRACE_GETREGS) and memory a 16 KiB window at a time (process_vm_readv), kept for the
// walk, and fall back to libunwind-ptrace's own reads for what process_vm_readv cannot read
// (a PROT_NONE page, say). A walk's copies are dropped at its end: the threads run between
// walks (and a walk at a hit runs beside the other threads).
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace probecost {

class UnwindTables;

class StackCollector {
 public:
  explicit StackCollector(unsigned max_depth);
  ~StackCollector();
  StackCollector(const StackCollector&) = delete;
  StackCollector& operator=(const StackCollector&) = delete;

  // Return addresses from the innermost frame out; the thread must be in a ptrace-stop.
  std::vector<std::uint64_t> capture(pid_t tid);
  // Where the thread's signal handlers return to, innermost first: the RIP saved in each signal
  // frame on its stack (found through unw_is_signal_frame), within the first max_depth frames.
  // A few other addresses come with them (see the .cpp); none strictly inside a patch range.
  std::vector<std::uint64_t> interrupted_pcs(pid_t tid);
  // The same, each with the address of the stack slot it was read from (unw_get_save_loc): in
  // the frame's saved ucontext, where rt_sigreturn will read RIP back from. 0 when libunwind
  // does not say (a register, not memory).
  struct SignalReturn {
    std::uint64_t pc = 0, slot = 0;
  };
  std::vector<SignalReturn> signal_returns(pid_t tid);
  void forget(pid_t tid);  // the thread is gone
  void flush();            // code was mapped or unmapped

  struct Walk;  // one walk's thread, registers and memory copies (stacks.cpp)

 private:
  bool init(Walk& walk, void* cursor);
  unsigned max_depth_;
  std::unique_ptr<UnwindTables> tables_;  // each module's unwind table, found once
  void* address_space_;
  std::map<pid_t, void*> handles_;
};

}  // namespace probecost
