// Injected code resumed, never single-stepped, to the exit of a system call at the vDSO's
// `syscall; leave; ret`, with a way back (way_back.hpp) lent to the thread all along: one
// system call (inject_with_way_back), or a batch of them in one lending (syscalls_in_tracee).
// Each lending costs a stop of the other threads, a frame written and put back, a mask and a
// filter read and a park at an interrupt stop, about as much as the calls themselves; the
// attach's hold paid it per call (issue 23: the jump area's memfd_create, two mmaps and close).
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "tracer/core/injected_syscall.hpp"
#include "tracer/core/process.hpp"
#include "tracer/core/way_back.hpp"
#include "tracer/os/seccomp.hpp"

namespace probecost {

void check_seccomp(pid_t pid, pid_t tid, long nr, const std::array<long, 6>& args, RuntimeAddr at) {
  auto o = seccomp::ThreadFilters::of(tid).fate(seccomp::x86_64_call(nr, args, at.value()));
  if (o.kind == seccomp::ThreadFilters::Fate::Kind::Runs) return;
  bool exec = (nr == SYS_mmap || nr == SYS_mprotect) && (args[2] & PROT_EXEC);
  throw seccomp::Refused("process " + std::to_string(pid) + " (thread " + std::to_string(tid) +
                         "): " + o.why + ", so probecost does not make it run one" +
                         (exec ? ": the process refuses executable mappings" : ""));
}

user_regs_struct syscall_regs(user_regs_struct regs, long nr, const std::array<long, 6>& args) {
  regs.rax = static_cast<unsigned long long>(nr);
  regs.rdi = args[0];
  regs.rsi = args[1];
  regs.rdx = args[2];
  regs.r10 = args[3];
  regs.r8 = args[4];
  regs.r9 = args[5];
  regs.orig_rax = static_cast<unsigned long long>(-1);
  return regs;
}

int RemoteCalls::run_to_exit_at(Task& t, RuntimeAddr syscall_at, const char* what,
                                const std::function<void(Task&)>& at_entry, double deadline) {
  pid_t tid = t.tid();
  auto gone = [&] { return Error("thread " + std::to_string(tid) + " went away during " + what); };
  for (;;) {
    if (!t.resume_to_syscall_exit()) throw gone();
    auto ws = proc_.wait_for(t, deadline);
    if (!ws) throw gone();
    if (ws->syscall_stop()) {
      auto info = t.syscall_info();
      if (!info) throw gone();
      if (info->instruction_pointer != (syscall_at + 2).value()) continue;  // the code's own
      if (info->op == PTRACE_SYSCALL_INFO_EXIT) return 0;
      if (info->op == PTRACE_SYSCALL_INFO_ENTRY && at_entry) at_entry(t);
    } else if (ws->signal_stop() && way_back::injected_code_faulted(tid, ws->stop_signal())) {
      return ws->stop_signal();  // it comes again at each resume
    } else if (ws->signal_stop()) {
      t.pending_signals.push_back(ws->stop_signal());  // delivered after
    } else if (!ws->stopped() || ws->ptrace_event() == PTRACE_EVENT_EXIT) {
      events_.defer(t, *ws);  // an exit: the event loop's
      throw gone();
    } else if (deadline > 0 && ws->interrupt_stop() && now_s() >= deadline) {
      return -1;  // wait_for's interrupt (or an older one: the time is up all the same)
    }
    // Else the trap of a PTRACE_INTERRUPT sent before (a stop-the-world that found the thread
    // stopped already): on to the call, as the single-steps go on past it. Thrown, it lost
    // the report of a busy-churn cycle ("thread went away during an injected system call").
  }
}

// Run by PTRACE_SYSCALL to the call's exit stop, never single-stepped: the step flag outlives
// a dying tracer and would trap the way back's first instruction.
long RemoteCalls::inject_with_way_back(Task& t, user_regs_struct regs,
                                       const user_regs_struct& saved, const way_back::Frame& frame,
                                       RuntimeAddr syscall_at) {
  pid_t tid = t.tid();
  auto gone = [&] {
    return Error("thread " + std::to_string(tid) + " went away during an injected system call");
  };
  regs.rbp = frame.rbp.value();
  regs.eflags &= ~0x100ull;
  if (!t.set_regs(regs)) throw gone();
  // From here a death of probecost lets the thread make the call and come back by the frame.
  int fault = run_to_exit_at(t, syscall_at, "an injected system call");
  const user_regs_struct* now = t.regs();
  if (!now) throw gone();
  long result = static_cast<long>(now->rax);
  // Its own registers at once. A death from here lets it go from this syscall-exit-stop with
  // them, and TIF_SIGPENDING set by the dying tracer's wake-up: the kernel restarts the call it
  // was interrupted in, as from any stop. Alive, we take it to an interrupt stop, for a resume
  // from a syscall-exit-stop would restart nothing (its read would return -ERESTARTSYS).
  if (!t.set_regs(saved)) throw gone();
  way_back::put_back(tid, frame);  // the frame no longer needed
  proc_.park_at_interrupt(t.ref());
  if (fault)
    throw Error("the code injected in thread " + std::to_string(tid) + " raised signal " +
                std::to_string(fault) + "; the thread has its registers back");
  return result;
}

// One thread lent to a batch of system calls: the frame written once, each call run from the
// last one's exit stop (where a death of probecost lets the thread back by the frame as well),
// and the thread's own registers, the frame's bytes and an interrupt stop given back at the end,
// however the batch ends.
class RemoteCalls::LentThread {
 public:
  LentThread(RemoteCalls& calls, Task& t, user_regs_struct saved, way_back::Frame frame,
             RuntimeAddr gadget)
      : calls_(calls),
        proc_(calls.proc_),
        ref_(t.ref()),
        saved_(saved),
        frame_(std::move(frame)),
        gadget_(gadget) {}
  ~LentThread() {
    try {
      Task* t = proc_.task(ref_);
      if (lent_ && t) t->set_regs(saved_);
      way_back::put_back(ref_.tid, frame_);
      if (lent_) proc_.park_at_interrupt(ref_);
    } catch (const Error&) {
      // The thread or its process is going away.
    }
  }
  LentThread(const LentThread&) = delete;
  LentThread& operator=(const LentThread&) = delete;

  long syscall(long nr, const std::array<long, 6>& args) {
    Task* t = proc_.task(ref_);
    if (!t) throw gone();
    if (!filters_) filters_ = seccomp::ThreadFilters::of(ref_.tid);
    auto o = filters_->fate(seccomp::x86_64_call(nr, args, gadget_.value()));
    if (o.kind != seccomp::ThreadFilters::Fate::Kind::Runs)
      check_seccomp(proc_.pid(), ref_.tid, nr, args, gadget_);  // throws, and says why
    user_regs_struct regs = syscall_regs(saved_, nr, args);
    regs.rip = gadget_.value();
    regs.rbp = frame_.rbp.value();
    regs.eflags &= ~0x100ull;
    if (!t->set_regs(regs)) throw gone();
    lent_ = true;
    // From here a death of probecost lets the thread make the call and come back by the frame.
    if (int fault = calls_.run_to_exit_at(*t, gadget_, "an injected system call"))
      throw Error("system call " + std::to_string(nr) + " injected in thread " +
                  std::to_string(ref_.tid) + " raised signal " + std::to_string(fault));
    const user_regs_struct* now = t->regs();
    if (!now) throw gone();
    return static_cast<long>(now->rax);
  }

 private:
  Error gone() const {
    return Error("thread " + std::to_string(ref_.tid) +
                 " went away during an injected system call");
  }

  RemoteCalls& calls_;
  TracedProcess& proc_;
  TaskRef ref_;
  user_regs_struct saved_;
  way_back::Frame frame_;
  RuntimeAddr gadget_;
  std::optional<seccomp::ThreadFilters> filters_;
  bool lent_ = false;
};

bool RemoteCalls::batch(const std::function<void(Task& lent, const SyscallRunner&)>& calls,
                        Task* via) {
  return with_others_stopped(via, [&](Task& t) {
    const user_regs_struct* now = t.regs();
    std::optional<way_back::Frame> frame;
    // A thread still held (held_lend.hpp says which) keeps that stop, single-stepped.
    if (now && !(t.held() && t.last_stop().signal_stop())) frame = way_back_frame(t, *now);
    std::optional<LentThread> lent;
    if (frame) lent.emplace(*this, t, *now, std::move(*frame), gadgets_->syscall_leave_ret);
    TaskRef ref = t.ref();
    // Without a way back here, each call single-stepped on its own.
    SyscallRunner run = [&](long nr, const std::array<long, 6>& args) {
      if (lent) return lent->syscall(nr, args);
      Task* again = proc_.task(ref);
      if (!again) throw Error("thread " + std::to_string(ref.tid) + " is gone");
      return inject_syscall(*again, nr, args);
    };
    // Until the calls are over, every other injection is refused (with_others_stopped), and
    // syscall() and remote_syscall come here.
    lending_ = {ref.tid, &run};
    struct Over {
      std::pair<pid_t, const SyscallRunner*>& lending;
      ~Over() { lending = {0, nullptr}; }
    } over{lending_};
    calls(t, run);
  });
}

}  // namespace probecost
