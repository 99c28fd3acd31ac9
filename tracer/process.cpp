#include "tracer/process.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include "breakpoint/error.hpp"
#include "breakpoint/outline.hpp"
#include "tracer/inject.hpp"
#include "tracer/maps.hpp"
#include "tracer/syscalls.hpp"

namespace probecost {

namespace {

// In the child between fork and exec: only async-signal-safe calls. A failure is reported to
// the parent as (step, errno) over the close-on-exec pipe; a successful exec closes the pipe.
[[noreturn]] void child_exec(const LaunchSpec& spec, bool traced, char* const argv[],
                            int report_fd) {
  auto fail = [&](int step) {
    int msg[2] = {step, errno};
    [[maybe_unused]] ssize_t n = ::write(report_fd, msg, sizeof msg);
    ::_exit(127);
  };
  if (spec.stdin_fd >= 0 && ::dup2(spec.stdin_fd, 0) < 0) fail(1);
  if (spec.stdout_fd >= 0 && ::dup2(spec.stdout_fd, 1) < 0) fail(1);
  if (spec.stderr_fd >= 0 && ::dup2(spec.stderr_fd, 2) < 0) fail(1);
  if (spec.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(spec.cpu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) < 0) fail(2);
  }
  // PTRACE_TRACEME: the exec below stops us with SIGTRAP before the first instruction of the
  // new program, so the parent can place breakpoints before main() runs.
  if (traced && ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) < 0) fail(3);
  ::execvp(argv[0], argv);
  fail(4);
  __builtin_unreachable();
}

const char* launch_step_name(int step) {
  switch (step) {
    case 1: return "redirect standard streams";
    case 2: return "pin to the requested CPU";
    case 3: return "PTRACE_TRACEME";
    default: return "exec";
  }
}

}  // namespace

TracedProcess::TracedProcess(pid_t pid, bool launched)
    : pid_(pid), launched_(launched), memory_(pid), sites_(memory_) {}

pid_t spawn(const LaunchSpec& spec, bool traced) {
  if (spec.argv.empty()) throw UsageError("no command to launch");
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int report[2];
  if (::pipe2(report, O_CLOEXEC) < 0) throw Error::from_errno("pipe2");
  pid_t pid = ::fork();
  if (pid < 0) throw Error::from_errno("fork");
  if (pid == 0) child_exec(spec, traced, argv.data(), report[1]);
  ::close(report[1]);

  int msg[2];
  ssize_t n;
  do n = ::read(report[0], msg, sizeof msg);
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof msg)) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    throw Error::from_errno("cannot launch '" + spec.argv[0] + "' (" + launch_step_name(msg[0]) +
                                ")",
                            msg[1]);
  }
  return pid;  // exec succeeded: the pipe was closed by it, with nothing written
}

std::unique_ptr<TracedProcess> TracedProcess::launch(const LaunchSpec& spec) {
  pid_t pid = spawn(spec, true);
  int status = 0;
  if (sys::wait_for(pid, &status, 0) != pid) throw Error::from_errno("waitpid after exec");
  WaitStatus ws(status);
  if (!ws.stopped() || ws.stop_signal() != SIGTRAP) {
    throw Error("'" + spec.argv[0] + "' did not stop after exec: " + ws.describe());
  }
  std::unique_ptr<TracedProcess> proc(new TracedProcess(pid, true));
  // EXITKILL: if probecost dies, a half-instrumented launched program must not run on.
  // TRACECLONE: new threads start traced (with a SIGSTOP pending), so none runs past a site.
  // TRACEEXEC: exec is an event, not a stray SIGTRAP; it replaces the address space.
  long opts = PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL | PTRACE_O_TRACESYSGOOD;
  if (sys::ptrace_call(PTRACE_SETOPTIONS, pid, nullptr, reinterpret_cast<void*>(opts)) < 0) {
    throw Error::from_errno("PTRACE_SETOPTIONS on " + std::to_string(pid));
  }
  proc->threads_[pid].stopped = true;
  return proc;
}

TracedProcess::~TracedProcess() {
  try {
    if (launched_) {
      kill();
    } else {
      detach();
    }
  } catch (const std::exception&) {
    // A destructor cannot report; detach()/kill() are called explicitly on the normal paths.
  }
}

void TracedProcess::thread_gone(pid_t tid, WaitStatus status) {
  threads_.erase(tid);
  if (tid == pid_) {
    end_ = status;
    sites_.forget_all();
    threads_.clear();
  }
}

void TracedProcess::resume(pid_t tid) {
  ThreadState& t = threads_.at(tid);
  int sig = t.pending_signal;
  t.pending_signal = 0;
  t.stopped = false;
  if (sys::ptrace_call(PTRACE_CONT, tid, nullptr, reinterpret_cast<void*>(long{sig})) < 0 &&
      errno != ESRCH) {
    throw Error::from_errno("PTRACE_CONT thread " + std::to_string(tid));
  }
  // ESRCH: the thread was killed meanwhile (SIGKILL needs no tracer consent); its exit is
  // reported by waitpid later.
}

void TracedProcess::stop_all(pid_t except) {
  for (auto& [tid, t] : threads_) {
    if (tid == except || t.stopped) continue;
    if (!t.expect_sigstop && sys::tgkill(pid_, tid, SIGSTOP) < 0) continue;
    t.expect_sigstop = true;
  }
  std::vector<pid_t> waiting;
  for (auto& [tid, t] : threads_) {
    if (tid != except && !t.stopped) waiting.push_back(tid);
  }
  for (pid_t tid : waiting) {
    int status = 0;
    pid_t r = sys::wait_for(tid, &status, __WALL);
    if (r != tid) continue;
    WaitStatus ws(status);
    if (ws.gone()) {
      thread_gone(tid, ws);
      continue;
    }
    ThreadState& t = threads_[tid];
    t.stopped = true;
    if (ws.signal_stop() && ws.stop_signal() == SIGSTOP && t.expect_sigstop) {
      t.expect_sigstop = false;  // ours: swallow it
    } else {
      // Something happened first (a breakpoint hit, a signal, a clone). Our SIGSTOP stays
      // pending and is swallowed when it shows up later.
      t.queued_status = status;
    }
  }
}

void TracedProcess::resume_stopped(pid_t except) {
  for (auto& [tid, t] : threads_) {
    if (tid != except && t.stopped && !t.queued_status) resume(tid);
  }
}

void TracedProcess::rewind_if_on_our_trap(pid_t tid, ThreadState& t) {
  if (!t.queued_status) return;
  WaitStatus ws(*t.queued_status);
  if (!ws.signal_stop() || ws.stop_signal() != SIGTRAP) return;
  siginfo_t info;
  if (sys::ptrace_call(PTRACE_GETSIGINFO, tid, nullptr, &info) < 0) return;
  if (classify_trap(info) != TrapCause::Breakpoint) return;
  user_regs_struct regs;
  if (sys::ptrace_call(PTRACE_GETREGS, tid, nullptr, &regs) < 0) return;
  RuntimeAddr at(regs.rip - 1);
  // Ours if a site is there now. (A program's own int3 leaves 0xCC in memory: not ours, so
  // the SIGTRAP is the program's and is delivered at detach.)
  if (sites_.find(at) || memory_.read_byte(at) != kInt3) {
    sys::ptrace_call(PTRACE_POKEUSER, tid,
                     reinterpret_cast<void*>(offsetof(struct user, regs.rip)),
                     reinterpret_cast<void*>(at.value()));
    t.queued_status.reset();
  } else {
    t.pending_signal = SIGTRAP;
    t.queued_status.reset();
  }
}

void TracedProcess::adopt_queued_clone(pid_t tid, ThreadState& t) {
  if (!t.queued_status || WaitStatus(*t.queued_status).ptrace_event() != PTRACE_EVENT_CLONE) return;
  unsigned long child = 0;
  t.queued_status.reset();
  if (sys::ptrace_call(PTRACE_GETEVENTMSG, tid, nullptr, &child) < 0) return;
  // The new thread is traced from birth and reports a SIGSTOP before running any code.
  int status = 0;
  if (sys::wait_for(static_cast<pid_t>(child), &status, __WALL) == static_cast<pid_t>(child) &&
      WaitStatus(status).stopped()) {
    threads_[static_cast<pid_t>(child)].stopped = true;
  }
}

void TracedProcess::drain_our_sigstop(pid_t tid, ThreadState& t) {
  // We sent a SIGSTOP that has not been reported yet. Left behind, it would stop the whole
  // process once we are gone, so let the thread run until it reports it (our int3 bytes are
  // already removed, so it cannot hit a breakpoint meanwhile).
  while (t.expect_sigstop) {
    if (sys::ptrace_call(PTRACE_CONT, tid, nullptr, nullptr) < 0) return;
    int status = 0;
    if (sys::wait_for(tid, &status, __WALL) != tid) return;
    WaitStatus ws(status);
    if (ws.gone()) return;
    if (ws.signal_stop() && ws.stop_signal() == SIGSTOP) {
      t.expect_sigstop = false;
    } else if (ws.signal_stop()) {
      t.pending_signal = ws.stop_signal();
    }
  }
}

void TracedProcess::detach() {
  if (detached_ || !alive()) return;
  stop_all();
  std::vector<pid_t> tids;
  for (auto& [tid, t] : threads_) tids.push_back(tid);
  for (pid_t tid : tids) adopt_queued_clone(tid, threads_[tid]);
  for (auto& [tid, t] : threads_) rewind_if_on_our_trap(tid, t);
  sites_.disable_all();
  for (auto& [tid, t] : threads_) {
    if (t.queued_status) {
      WaitStatus ws(*t.queued_status);
      if (ws.signal_stop() && ws.stop_signal() != SIGSTOP) t.pending_signal = ws.stop_signal();
      t.queued_status.reset();
    }
    drain_our_sigstop(tid, t);
    // The signal the thread was stopped with is delivered as we leave (PTRACE_DETACH's data).
    sys::ptrace_call(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(long{t.pending_signal}));
  }
  threads_.clear();
  detached_ = true;
}

RuntimeAddr TracedProcess::map_scratch(RuntimeAddr near) {
  pid_t tid = 0;
  for (auto& [id, t] : threads_) {
    if (t.stopped && !t.queued_status) tid = id;
  }
  if (!tid) throw Error("mapping a scratch page needs a stopped thread");
  // Within +-2 GiB of `near` (less a margin), so that a relocated RIP-relative operand and a
  // 5-byte jmp back both reach. MAP_FIXED_NOREPLACE: never clobber an existing mapping.
  constexpr std::uint64_t kReach = (1ull << 31) - (1ull << 20);
  auto hint = free_range_near(read_maps(pid_), near, kPageSize, kReach);
  long flags = MAP_PRIVATE | MAP_ANONYMOUS | (hint ? MAP_FIXED_NOREPLACE : 0);
  long addr = inject_syscall(tid, memory_, SYS_mmap,
                             {static_cast<long>(hint ? hint->value() : 0),
                              static_cast<long>(kPageSize), PROT_READ | PROT_EXEC, flags, -1, 0});
  if (addr < 0 && addr > -4096) {
    throw Error::from_errno("mmap of a scratch page in process " + std::to_string(pid_),
                            static_cast<int>(-addr));
  }
  scratch_pages_.push_back(RuntimeAddr(static_cast<std::uint64_t>(addr)));
  return scratch_pages_.back();
}

void TracedProcess::kill() {
  if (!alive()) return;
  try {
    sites_.disable_all();  // harmless if it fails: the process is about to die
  } catch (const std::exception&) {
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  // Reap every thread: with __WALL each traced thread reports its own exit.
  while (!threads_.empty()) {
    pid_t r = sys::wait_for(-1, &status, __WALL);
    if (r < 0) break;
    if (WaitStatus(status).gone()) thread_gone(r, WaitStatus(status));
  }
  if (!end_) end_ = WaitStatus(status);
}

}  // namespace probecost
