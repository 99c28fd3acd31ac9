// RemoteCalls (remote_calls.hpp): the lending of a thread to calls of ours, and the choice of
// how each is run (with a way back, else single-stepped).
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>

#include <cstring>

#include "breakpoint/int3/outline.hpp"
#include "common/error.hpp"
#include "tracer/core/held_lend.hpp"
#include "tracer/core/injected_syscall.hpp"
#include "tracer/core/process.hpp"
#include "tracer/core/way_back.hpp"
#include "tracer/os/fault_plan.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/os/seccomp.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost {

namespace {

// SIGTRAP unblocked in `t` while we inject code into it. Each single-step's trap is forced on
// the thread, and the kernel's force_sig resets a blocked signal's disposition to SIG_DFL, for
// the whole process: injecting into a thread that blocks SIGTRAP (pthread_create blocks every
// signal in a new thread until its start routine runs) took the program's SIGTRAP handler away
// (seen with fault_busy --churn). The mask is set with ptrace, not an injected call.
class SigtrapUnblocked {
 public:
  explicit SigtrapUnblocked(Task& t) : t_(t), saved_(t.blocked_signals()) {
    constexpr std::uint64_t bit = 1ull << (SIGTRAP - 1);
    if (saved_ && (*saved_ & bit) && t_.set_blocked_signals(*saved_ & ~bit)) return;
    saved_.reset();  // nothing to put back
  }
  ~SigtrapUnblocked() {
    try {
      if (saved_) t_.set_blocked_signals(*saved_);
    } catch (const Error&) {
      // The thread is going away with its process.
    }
  }
  SigtrapUnblocked(const SigtrapUnblocked&) = delete;
  SigtrapUnblocked& operator=(const SigtrapUnblocked&) = delete;

 private:
  Task& t_;
  std::optional<std::uint64_t> saved_;
};

}  // namespace

// At a PTRACE_EVENT_CLONE/FORK/EXEC/VFORK_DONE stop the thread is still inside the system
// call: RAX holds the -ENOSYS the entry code put there, and the call's result is written only
// when the thread leaves the kernel. Injected code run from that stop leaves the kernel first,
// so the result lands in the injected registers and the -ENOSYS is what we "restore" after:
// glibc's pthread_create took clone3's -ENOSYS for "no clone3" and created the thread a
// second time with clone (fault_suite signals: a SIGINT during pthread_create, 4 of 60
// launched cycles died of SIGSEGV in a thread whose start routine had been freed). So the
// thread finishes its call first, at its syscall-exit-stop, where RAX is the result.
bool RemoteCalls::leave_syscall_event(Task& t) {
  int event = t.last_stop().ptrace_event();
  if (event != PTRACE_EVENT_CLONE && event != PTRACE_EVENT_FORK && event != PTRACE_EVENT_EXEC &&
      event != PTRACE_EVENT_VFORK_DONE) {
    return true;  // not inside a system call (or one whose result the stop already holds)
  }
  if (!t.resume_to_syscall_exit()) return false;
  for (;;) {
    auto ws = proc_.wait_for(t);
    if (!ws) return false;
    if (ws->syscall_stop()) return true;
    // Nothing but a signal can come first (a SIGKILL ends the thread: no report then).
    if (ws->signal_stop()) t.pending_signals.push_back(ws->stop_signal());
    if (!t.resume_to_syscall_exit()) return false;
  }
}

bool RemoteCalls::with_others_stopped(Task* via, const std::function<void(Task&)>& inject) {
  // A thread lent to a batch runs on registers of ours: nothing else is injected meanwhile.
  if (lending_.second) throw Error("an injected call inside a batch of injected system calls");
  Task* t = via ? via : any_stopped_thread();
  if (!t) return false;
  release_hold(proc_, *t);  // before the others stop: their waits would collect it in place
  TaskRef ref = t->ref();
  OthersStopped others(proc_, ref.tid);
  t = proc_.task(ref);  // another thread's exec may have ended it meanwhile
  if (!t || !leave_syscall_event(*t) || !leave_rseq_sequence(proc_.memory(), *t)) return false;
  lent_mask_ = t->blocked_signals();  // before SIGTRAP is unblocked: the way back's mask
  SigtrapUnblocked unblocked(*t);
  inject(*t);
  return true;
}

std::optional<way_back::Frame> RemoteCalls::way_back_frame(Task& t, const user_regs_struct& saved,
                                                           std::uint64_t below) {
  if (!gadgets_tried_) {
    gadgets_ = way_back::find_gadgets(proc_.memory(), proc_.proc_tid(), proc_.maps());
    gadgets_tried_ = true;
  }
  if (!gadgets_ || !lent_mask_) return std::nullopt;
  return way_back::write_frame(t.tid(), saved, *lent_mask_, *gadgets_, below);
}

std::optional<long> RemoteCalls::syscall(long nr, const std::array<long, 6>& args, Task* via) {
  if (lending_.second && (!via || via->tid() == lending_.first))
    return (*lending_.second)(nr, args);  // the batch's thread
  // A batch of one: with a way back where the thread has one, else single-stepped.
  std::optional<long> r;
  batch([&](Task&, const SyscallRunner& run) { r = run(nr, args); }, via);
  return r;
}

bool RemoteCalls::in_one_lending(const std::function<void()>& body) {
  if (lending_.second) {  // one lending at a time: the calls go to the one open
    body();
    return true;
  }
  return batch([&](Task&, const SyscallRunner&) { body(); });
}

std::optional<long> RemoteCalls::run_code(RuntimeAddr code, RuntimeAddr syscall_at, long nr,
                                          const std::array<long, 6>& args) {
  std::optional<long> r;
  with_others_stopped(nullptr, [&](Task& t) {
    const user_regs_struct* now = t.regs();
    if (!now || (t.held() && t.last_stop().signal_stop())) return;
    user_regs_struct saved = *now;
    auto frame = way_back_frame(t, saved);
    if (!frame) return;
    way_back::PutBack unless_lent(t.tid(), *frame);
    check_seccomp(proc_.pid(), t.tid(), nr, args, syscall_at);
    unless_lent.release();
    user_regs_struct regs = syscall_regs(saved, nr, args);
    regs.rip = code.value();
    // inloop+2: the code's registers set, the thread not yet resumed.
    fault_plan::at_stage("inloop");
    r = inject_with_way_back(t, regs, saved, *frame, syscall_at);
  });
  return r;
}

std::optional<std::uint64_t> RemoteCalls::call(RuntimeAddr fn, Task* via) {
  // The function runs on the process's memory: no other thread runs meanwhile.
  std::optional<std::uint64_t> r;
  with_others_stopped(via, [&](Task& t) { r = inject_call(t, fn); });
  return r;
}

Task* RemoteCalls::any_stopped_thread() {
  // Best one not held at a signal stop: lending such a thread lets go of its hold first
  // (held_lend.hpp: a rewind onto its site, a wait), a few calls more.
  Task* held = nullptr;
  for (auto& [tid, t] : proc_.threads()) {
    // A task with a deferred event must stay in the stop it reported (injecting a system call
    // would turn a group-stop into a SIGTRAP stop, for one).
    // Nor a thread at a vfork event (to finish its call it would wait for the child) or an
    // exit event (it runs no user code again).
    int event = t.last_stop().ptrace_event();
    if (event == PTRACE_EVENT_VFORK || event == PTRACE_EVENT_EXIT) continue;
    if (!t.stopped() || t.deferred || t.role() != Task::Role::Thread) continue;
    if (!(t.held() && t.last_stop().signal_stop())) return &t;
    if (!held) held = &t;
  }
  return held;
}

}  // namespace probecost
