#pragma once
// RemoteCalls: system calls and function calls a thread of a traced process is made to run for
// us (rr's AutoRemoteSyscalls), and the lending of that thread: every other thread stopped, the
// thread taken out of a system call's event stop or a restartable sequence, SIGTRAP unblocked,
// and everything given back however the call ends. One per TracedProcess, which owns it.
//
// Two ways to run a call (remote_calls*.cpp):
// - resumed with a way back (way_back.hpp; remote_calls_batch.cpp, remote_calls_function.cpp):
//   the thread's own registers saved in a frame in the tracee, so that a death of probecost
//   mid-call lets the thread back to them by itself. One call, or a batch in one lending;
// - single-stepped (remote_calls_stepped.cpp) where no way back can be had (no vDSO gadgets, no
//   room on the stack, a stop whose signal the kernel holds): a death then lets the thread go
//   on our registers.
#include <sys/types.h>
#include <sys/user.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

#include "common/address.hpp"
#include "tracer/core/task.hpp"
#include "tracer/core/way_back.hpp"

namespace probecost {

class EventSource;
class TraceeMemory;
class TracedProcess;

// A thread inside a restartable sequence of the program's is sent to its abort handler first,
// as the kernel would at its resume (process_rseq.cpp). False when it is gone.
bool leave_rseq_sequence(TraceeMemory& memory, Task& task);

class RemoteCalls {
 public:
  RemoteCalls(TracedProcess& proc, EventSource& events) : proc_(proc), events_(events) {}
  RemoteCalls(const RemoteCalls&) = delete;
  RemoteCalls& operator=(const RemoteCalls&) = delete;

  // Runs system call `nr` in a stopped thread of the tracee (`via`, or any), every other thread
  // stopped meanwhile: its raw result (-errno on failure); nothing when none can run it now.
  // Inside a batch, it is one of the batch's calls (in the lent thread).
  std::optional<long> syscall(long nr, const std::array<long, 6>& args, Task* via = nullptr);
  // The same for a batch: `calls` makes each through its argument, all in one thread lent once
  // (one stop of the others, one way back, one park: remote_calls_batch.cpp). False: none ran.
  using SyscallRunner = std::function<long(long nr, const std::array<long, 6>& args)>;
  bool batch(const std::function<void(Task& lent, const SyscallRunner&)>& calls,
             Task* via = nullptr);
  // `body` with one thread lent to every call it makes through syscall() (a batch whose
  // calls are made by others: the int3 floor's remote_syscall). Inside a batch, it is run in it.
  bool in_one_lending(const std::function<void()>& body);
  // The thread lent to the batch now, 0 when none.
  pid_t lent() const { return lending_.second ? lending_.first : 0; }
  // Calls the function at `fn` (no arguments) as syscall() runs a call: RAX, the thread's
  // registers as before afterwards. For IFUNC resolvers.
  std::optional<std::uint64_t> call(RuntimeAddr fn, Task* via = nullptr);
  // Runs our `code` in a stopped thread, every other thread stopped, resumed rather than
  // single-stepped: it starts with the registers of system call `nr` (`args`) and must end in
  // `syscall; leave; ret` at `syscall_at`, with RAX and RBP as it found them, so that a death
  // of probecost meanwhile lets the thread back to its own registers (way_back.hpp). The
  // call's result; nothing when no thread can run it or the process has no way back.
  std::optional<long> run_code(RuntimeAddr code, RuntimeAddr syscall_at, long nr,
                               const std::array<long, 6>& args);
  // A stopped thread that may run an injected system call (one with no deferred event).
  Task* any_stopped_thread();
  // After an exec: a new vDSO, whose syscall instruction and gadgets are looked for again.
  void forget_vdso() { syscall_insn_tried_ = gadgets_tried_ = false; }

 private:
  class LentThread;  // a batch's (remote_calls_batch.cpp)

  // Runs `inject` on `via` (or any stopped thread) with every other thread stopped meanwhile;
  // false when there is no such thread, or it ended while the others stopped.
  bool with_others_stopped(Task* via, const std::function<void(Task&)>& inject);
  // A thread in a clone/fork/exec event stop is inside that system call, whose result the
  // kernel stores in RAX only at its exit: taken to the syscall-exit-stop first. False when
  // it is gone or the stop is not one to inject in.
  bool leave_syscall_event(Task& task);
  // A way back's frame (way_back.hpp) for `task`, `below` bytes of stack under it; or no room.
  std::optional<way_back::Frame> way_back_frame(Task& task, const user_regs_struct& saved,
                                                std::uint64_t below = 0);
  // Resumes `task` to the syscall-exit-stop at `syscall_at` (`at_entry` at its entry stop): 0,
  // the injected code's fault signal, or -1: interrupted past `deadline`. Throws when gone.
  int run_to_exit_at(Task& task, RuntimeAddr syscall_at, const char* what,
                     const std::function<void(Task&)>& at_entry = nullptr, double deadline = 0);
  // From regs.rip, resumed (never stepped) to the exit of the call at `syscall_at`.
  long inject_with_way_back(Task& task, user_regs_struct regs, const user_regs_struct& saved,
                            const way_back::Frame& frame, RuntimeAddr syscall_at);
  std::optional<std::uint64_t> call_with_way_back(Task& task, RuntimeAddr fn,
                                                  const user_regs_struct& saved);
  // Single-stepped (remote_calls_stepped.cpp).
  long inject_syscall(Task& task, long nr, const std::array<long, 6>& args);
  std::uint64_t inject_call(Task& task, RuntimeAddr fn);
  const user_regs_struct* step_injected(Task& task);  // one step; nullptr: gone
  // Its registers back from that stop (the last step's: `keep_step_stop`). False: gone.
  bool give_back_registers(Task& task, const user_regs_struct& saved, bool keep_step_stop);
  // After single-stepped injected code: to an interrupt stop, no signal or step flag held.
  void park_after_steps(TaskRef ref);

  TracedProcess& proc_;
  EventSource& events_;
  std::optional<RuntimeAddr> syscall_insn_;  // the vDSO's, where single-stepped calls run
  std::optional<way_back::Gadgets> gadgets_;
  bool syscall_insn_tried_ = false, gadgets_tried_ = false;
  std::optional<std::uint64_t> lent_mask_;                      // of the thread lent now, as it was
  std::pair<pid_t, const SyscallRunner*> lending_{0, nullptr};  // batch()'s
};

}  // namespace probecost
