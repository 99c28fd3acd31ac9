#include "tracer/session.hpp"

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>

#include <cstddef>
#include <tuple>

#include "breakpoint/error.hpp"
#include "tracer/syscalls.hpp"

namespace probecost {

std::atomic<bool>& stop_requested() {
  static std::atomic<bool> flag{false};
  return flag;
}

std::atomic<bool>& tick_requested() {
  static std::atomic<bool> flag{false};
  return flag;
}

namespace {

// The StoppedThread a step-over strategy works on: registers read once per stop.
class Stopped final : public StoppedThread {
 public:
  Stopped(TracedProcess& proc, pid_t tid, SessionStats& stats)
      : proc_(proc), tid_(tid), stats_(stats) {}

  RuntimeAddr pc() override {
    if (!have_regs_ && !have_pc_) {
      errno = 0;
      long rip = sys::ptrace_call(PTRACE_PEEKUSER, tid_,
                                  reinterpret_cast<void*>(offsetof(struct user, regs.rip)));
      if (rip == -1 && errno)
        throw Error::from_errno("reading RIP of thread " + std::to_string(tid_));
      regs_.rip = static_cast<unsigned long long>(rip);
      have_pc_ = true;
    }
    return RuntimeAddr(regs_.rip);
  }

  const user_regs_struct& regs() override {
    if (!have_regs_) {
      if (sys::ptrace_call(PTRACE_GETREGS, tid_, nullptr, &regs_) < 0) {
        throw Error::from_errno("PTRACE_GETREGS thread " + std::to_string(tid_));
      }
      have_regs_ = true;
    }
    return regs_;
  }

  void set_pc(RuntimeAddr pc) override {
    // POKEUSER of one word instead of SETREGS: same one system call, and nothing else of the
    // register file is written back by accident.
    if (sys::ptrace_call(PTRACE_POKEUSER, tid_,
                         reinterpret_cast<void*>(offsetof(struct user, regs.rip)),
                         reinterpret_cast<void*>(pc.value())) < 0) {
      throw Error::from_errno("setting RIP of thread " + std::to_string(tid_));
    }
    regs_.rip = pc.value();
  }

  void set_regs(const user_regs_struct& regs) override {
    if (sys::ptrace_call(PTRACE_SETREGS, tid_, nullptr, const_cast<user_regs_struct*>(&regs)) < 0) {
      throw Error::from_errno("PTRACE_SETREGS thread " + std::to_string(tid_));
    }
    regs_ = regs;
  }

  void single_step() override {
    ThreadState& t = proc_.threads().at(tid_);
    for (;;) {
      if (sys::ptrace_call(PTRACE_SINGLESTEP, tid_, nullptr, nullptr) < 0) {
        throw Error::from_errno("PTRACE_SINGLESTEP thread " + std::to_string(tid_));
      }
      int status = 0;
      if (sys::wait_for(tid_, &status, __WALL) != tid_) {
        throw Error::from_errno("waitpid during single-step of thread " + std::to_string(tid_));
      }
      ++stats_.stops;
      have_pc_ = false;
      WaitStatus ws(status);
      if (ws.gone()) throw Error("thread " + std::to_string(tid_) + " ended while single-stepped");
      if (ws.signal_stop() && ws.stop_signal() == SIGTRAP) break;
      // A signal arrived before the step completed: keep it for the next resume (delivering it
      // now would run the tracee's handler with our int3 byte removed), and step again. An
      // interrupt's PTRACE_EVENT_STOP carries nothing: step again.
      if (ws.signal_stop()) t.pending_signal = ws.stop_signal();
    }
    have_regs_ = false;
  }

 private:
  TracedProcess& proc_;
  pid_t tid_;
  SessionStats& stats_;
  user_regs_struct regs_{};
  bool have_regs_ = false;
  bool have_pc_ = false;
};

}  // namespace

bool Session::next_event(pid_t& tid, int& status, const std::function<bool()>& on_tick,
                         bool& tick_end) {
  // Events queued while stopping all threads come first: the kernel already reported them.
  if (auto queued = proc_.take_queued()) {
    std::tie(tid, status) = *queued;
    return true;
  }
  for (;;) {
    // waitpid, not wait4 with an rusage: for every stop the kernel would sum the CPU time of
    // the whole thread group (measured: ~0.5 us a hit). See TracedProcess::cpu_seconds().
    tid = sys::wait_for(-1, &status, __WALL, true);
    if (tid >= 0) return true;
    if (errno == EINTR) {
      if (stop_requested()) return false;
      if (tick_requested().exchange(false) && on_tick && on_tick()) {
        tick_end = true;
        return false;
      }
      continue;
    }
    if (errno == ECHILD) return false;
    throw Error::from_errno("waitpid");
  }
}

Session::End Session::run(const std::function<bool()>& stop_after_hit,
                          const std::function<bool()>& on_tick) {
  // The launch/attach stop (and any others left from before) are resumed first.
  for (auto& [tid, t] : proc_.threads()) {
    if (t.stopped && !t.queued_status && !t.awaiting_parent) proc_.resume(tid);
  }
  while (proc_.alive()) {
    if (stop_requested()) return End::Interrupted;
    pid_t tid;
    int status;
    bool tick_end = false;
    if (!next_event(tid, status, on_tick, tick_end)) {
      if (tick_end) return End::Tick;
      return stop_requested() ? End::Interrupted : End::ProcessEnded;
    }
    hit_happened_ = false;
    dispatch(tid, WaitStatus(status));
    if (!proc_.alive()) break;
    if (hit_happened_ && stop_after_hit && stop_after_hit()) return End::Predicate;
    auto it = proc_.threads().find(tid);
    if (it != proc_.threads().end() && it->second.stopped && !it->second.awaiting_parent) {
      proc_.resume(tid);
    }
  }
  return proc_.end() ? End::ProcessEnded : End::Exec;
}

void Session::dispatch(pid_t tid, WaitStatus ws) {
  if (ws.gone()) {
    proc_.thread_gone(tid, ws);
    return;
  }
  ++stats_.stops;
  auto [it, is_new] = proc_.threads().try_emplace(tid);
  ThreadState& t = it->second;
  t.stopped = true;
  if (is_new && proc_.is_foreign(tid)) {
    // A fork child whose first stop came before its parent's PTRACE_EVENT_FORK (the kernel
    // does not order the two): hold it until the parent's event says what it is.
    t.awaiting_parent = true;
    return;
  }
  if (ws.group_stop()) {
    // The process is being stopped (SIGSTOP/SIGTSTP from a shell): stay stopped, as without
    // a tracer, and be told of the SIGCONT. PTRACE_LISTEN, not PTRACE_CONT, does that.
    proc_.listen(tid);
    return;
  }
  if (ws.ptrace_event() != 0) return on_event(tid, ws.ptrace_event());
  if (ws.syscall_stop()) return;
  int sig = ws.stop_signal();
  if (sig == SIGTRAP) return on_trap(tid);
  t.pending_signal = sig;  // meant for the tracee: deliver it
  ++stats_.signals_passed;
}

void Session::on_event(pid_t tid, int event) {
  unsigned long msg = 0;
  switch (event) {
    case PTRACE_EVENT_CLONE:
      // The new thread is traced from birth and reports a PTRACE_EVENT_STOP of its own, before
      // running any code; it is resumed then. Nothing to do here.
      sys::ptrace_call(PTRACE_GETEVENTMSG, tid, nullptr, &msg);
      proc_.threads().try_emplace(static_cast<pid_t>(msg));
      return;
    case PTRACE_EVENT_FORK:
    case PTRACE_EVENT_VFORK:
      sys::ptrace_call(PTRACE_GETEVENTMSG, tid, nullptr, &msg);
      proc_.adopt_child(static_cast<pid_t>(msg), event == PTRACE_EVENT_VFORK);
      return;
    case PTRACE_EVENT_EXEC:
      if (proc_.threads().at(tid).vfork_child) {
        proc_.release_vfork_child(tid);  // it has its own address space now
      } else {
        proc_.exec_happened();  // the old address space, and our int3 bytes, are gone
      }
      return;
    default:
      return;  // PTRACE_EVENT_STOP (an interrupt, a new thread's first stop): just resume
  }
}

void Session::on_trap(pid_t tid) {
  ThreadState& t = proc_.threads().at(tid);
  if (floor_mode_) {
    // ptrace-floor: a compiled-in int3. Count it and let run() resume the thread; no register,
    // siginfo or memory access: one stop, waitpid + PTRACE_CONT.
    ++stats_.hits;
    ++t.hits;
    hit_happened_ = true;
    return;
  }
  Stopped thread(proc_, tid, stats_);
  // Fast classification: RIP one past a site whose int3 never leaves and whose displaced
  // instruction is longer than a byte can only be that int3 (see trap_is_unambiguous), so
  // PTRACE_GETSIGINFO is skipped.
  RuntimeAddr pc = step_over_.pc_suffices() ? thread.pc() : RuntimeAddr(thread.regs().rip);
  BreakpointSite* site = proc_.sites().find(pc - 1);
  if (site && site->enabled() && step_over_.trap_is_unambiguous(*site)) {
    on_hit(tid, t, thread, *site);
    return;
  }
  siginfo_t info;
  if (sys::ptrace_call(PTRACE_GETSIGINFO, tid, nullptr, &info) < 0) {
    throw Error::from_errno("PTRACE_GETSIGINFO thread " + std::to_string(tid));
  }
  if (classify_trap(info) == TrapCause::Breakpoint && on_breakpoint(tid, t, thread)) return;
  t.pending_signal = SIGTRAP;  // the program's own int3 or a SIGTRAP sent to it
  ++stats_.signals_passed;
}

bool Session::on_breakpoint(pid_t tid, ThreadState& t, StoppedThread& thread) {
  RuntimeAddr at = thread.pc() - 1;
  BreakpointSite* site = proc_.sites().find(at);
  if (!site || !site->enabled()) {
    // Our int3 removed after this thread hit it but before we saw the hit: rewind and go on.
    if (proc_.memory().read_byte(at) == kInt3) return false;
    thread.set_pc(at);
    return true;
  }
  on_hit(tid, t, thread, *site);
  return true;
}

void Session::on_hit(pid_t tid, ThreadState& t, StoppedThread& thread, BreakpointSite& site) {
  // The empty handler: count the hit.
  if (observer_) observer_(tid, thread, site);
  ++site.hits;
  ++t.hits;
  ++stats_.hits;
  hit_happened_ = true;
  bool all_stop = proc_.threads().size() > 1 && step_over_.needs_all_stop(site);
  if (all_stop) proc_.stop_all(tid);
  step_over_.step(thread, site);
  if (all_stop) proc_.resume_stopped(tid);
}

}  // namespace probecost
