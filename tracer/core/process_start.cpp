// Starting to trace: launching a command under ptrace, attaching to a running process, and
// spawning an untraced one (fork + exec with an honest exec error).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/cpu.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "tracer/core/cannot_trace.hpp"
#include "tracer/core/left_loops.hpp"
#include "tracer/core/process.hpp"
#include "tracer/int3/guardian.hpp"
#include "tracer/int3/int3_area.hpp"
#include "tracer/os/proc_files.hpp"
#include "tracer/os/syscalls.hpp"
#include "tracer/os/ticker.hpp"

namespace probecost {

namespace {

// CLONE: new threads start traced, stopped, so none runs past a site unseen. FORK/VFORK: a
// child would otherwise inherit our int3 bytes with nobody to handle them. EXEC: an event,
// not a stray SIGTRAP; it replaces the address space. VFORKDONE: the vfork()ing thread stops
// once its child has exec'd or exited, before it runs again: from then on its thread pointer,
// which the child ran with, is its own again (`probecost record` files records by it).
constexpr long kOptions = kTraceOptions;

// In the child between fork and exec: only async-signal-safe calls. A failure is reported to
// the parent as (step, errno) over the close-on-exec pipe; a successful exec closes the pipe.
[[noreturn]] void child_exec(const LaunchSpec& spec, bool stop_first, char* const argv[],
                             int report_fd) {
  auto fail = [&](int step) {
    int msg[2] = {step, errno};
    [[maybe_unused]] ssize_t n = ::write(report_fd, msg, sizeof msg);
    ::_exit(127);
  };
  if (spec.stdin_fd >= 0 && ::dup2(spec.stdin_fd, 0) < 0) fail(1);
  if (spec.stdout_fd >= 0 && ::dup2(spec.stdout_fd, 1) < 0) fail(1);
  if (spec.stderr_fd >= 0 && ::dup2(spec.stderr_fd, 2) < 0) fail(1);
  if (spec.cpu >= 0 && !pin_to_cpu(spec.cpu)) fail(2);
  // Stop here so the parent can PTRACE_SEIZE us before the exec (strace does the same).
  if (stop_first) ::raise(SIGSTOP);
  // execv, not execvp: on ENOEXEC execvp runs the file as a /bin/sh script, which would
  // trace a shell instead of reporting a file that is not a program.
  ::execv(argv[0], argv);
  fail(3);
  __builtin_unreachable();
}

const char* launch_step_name(int step) {
  switch (step) {
    case 1:
      return "redirect standard streams";
    case 2:
      return "pin to the requested CPU";
    default:
      return "exec";
  }
}

// argv[0] as execvp would find it: as given when it has a '/', else the first executable
// file of that name in $PATH.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw CannotTrace(0, CannotTrace::Reason::NoProgram,
                    "cannot launch '" + name + "': no such program in PATH");
}

pid_t fork_child(const LaunchSpec& spec, bool stop_first, Fd& report_fd) {
  if (spec.argv.empty())
    throw CannotTrace(0, CannotTrace::Reason::NoCommand, "no command to launch");
  std::string program = find_program(spec.argv[0]);
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv[0] = program.data();
  argv.push_back(nullptr);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) < 0) throw Error::from_errno("pipe2");
  Fd read_end(report[0]), write_end(report[1]);
  pid_t pid = ::fork();
  if (pid < 0) throw Error::from_errno("fork");
  if (pid == 0) child_exec(spec, stop_first, argv.data(), report[1]);
  report_fd = std::move(read_end);
  return pid;  // our copy of the write end closed: the exec closes the child's
}

// Reads the child's report: nothing (EOF) means its exec succeeded.
void check_exec_report(const Fd& fd, pid_t pid, const LaunchSpec& spec) {
  int msg[2];
  ssize_t n;
  do n = ::read(fd.get(), msg, sizeof msg);
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof msg)) return;
  sys::kill(pid, SIGKILL);
  int status;
  while (sys::wait_for(pid, &status, __WALL) == pid && !WaitStatus(status).gone()) {
  }
  throw Error::from_errno("cannot launch '" + spec.argv[0] + "' (" + launch_step_name(msg[0]) + ")",
                          msg[1]);
}

void check_attachable(pid_t pid) {
  using R = CannotTrace::Reason;
  std::string p = std::to_string(pid);
  auto refuse = [pid](R reason, const std::string& what) { return CannotTrace(pid, reason, what); };
  if (pid <= 0) throw refuse(R::BadPid, "bad PID " + p);
  if (pid == ::getpid()) throw refuse(R::Itself, "process " + p + " is probecost itself");
  if (sys::kill(pid, 0) < 0 && errno == ESRCH)
    throw refuse(R::NoProcess, "no process with PID " + p);
  std::string state = stat_field(pid, 3);
  if (state.empty()) throw refuse(R::NoProcess, "no process with PID " + p);
  // /proc/TID answers for any thread, and seizing a thread's TID would trace its whole group
  // under a wrong name: say which process it belongs to.
  if (pid_t tgid = tgid_of(pid); tgid != 0 && tgid != pid) {
    throw refuse(R::Thread, "PID " + p + " is a thread of process " + std::to_string(tgid) +
                                "; give the process: -p " + std::to_string(tgid));
  }
  // A zombie leader whose other threads live (it called pthread_exit) is a running process.
  if (state == "Z" && task_ids(pid).size() <= 1) {
    throw refuse(R::Zombie,
                 "process " + p + " is a zombie: it has exited and only waits to be reaped");
  }
  constexpr unsigned long kPfKthread = 0x00200000;  // include/linux/sched.h
  if (std::stoul(stat_field(pid, 9)) & kPfKthread) {
    throw refuse(R::KernelThread,
                 "process " + p + " is a kernel thread: it has no user space to probe");
  }
}

}  // namespace

pid_t spawn(const LaunchSpec& spec) {
  Fd report;
  pid_t pid = fork_child(spec, false, report);
  check_exec_report(report, pid, spec);
  return pid;
}

WaitStatus spawn_and_wait(const LaunchSpec& spec) {
  pid_t pid = spawn(spec);
  int status = 0;
  // Woken by the tick and by stop requests: a stop request ends the child (SIGKILL), whose
  // end is then reaped as any other.
  while (sys::wait_for(pid, &status, 0, true) < 0) {
    if (errno != EINTR) throw Error::from_errno("waitpid on '" + spec.argv[0] + "'");
    if (stop_requested()) sys::kill(pid, SIGKILL);
  }
  return WaitStatus(status);
}

TracedProcess::TracedProcess(pid_t pid, bool launched, EventSource& events)
    : pid_(pid), launched_(launched), events_(events) {}

std::unique_ptr<TracedProcess> TracedProcess::follower(pid_t pid, EventSource& events) {
  return std::unique_ptr<TracedProcess>(new TracedProcess(pid, false, events));
}

std::unique_ptr<TracedProcess> TracedProcess::launch(const LaunchSpec& spec, EventSource& events) {
  double children_cpu = children_cpu_seconds();
  Fd report;
  pid_t pid = fork_child(spec, true, report);
  int status = 0;
  // Retried on EINTR: a stop request now must not read the exec report of a child that is
  // still stopped before its exec (the read would wait for ever).
  if (sys::wait_for(pid, &status, WUNTRACED) != pid || !WaitStatus(status).stopped()) {
    check_exec_report(report, pid, spec);  // it failed before its exec: say why
    throw Error("'" + spec.argv[0] + "' " + WaitStatus(status).describe() + " before its exec");
  }
  // EXITKILL: if probecost dies, a half-instrumented launched program must not run on.
  if (sys::ptrace_call(PTRACE_SEIZE, pid, nullptr,
                       reinterpret_cast<void*>(kOptions | PTRACE_O_EXITKILL)) < 0) {
    int err = errno;
    sys::kill(pid, SIGKILL);
    sys::wait_for(pid, &status, 0);
    throw Error::from_errno("cannot trace '" + spec.argv[0] + "' (PTRACE_SEIZE)", err);
  }
  // Seizing a stopped task re-traps it into a ptrace-stop that SIGCONT alone cannot end: it is
  // resumed below, and the exec report is read only once the exec has happened or failed.
  sys::kill(pid, SIGCONT);
  std::unique_ptr<TracedProcess> proc(new TracedProcess(pid, true, events));
  proc->children_cpu_at_launch_ = children_cpu;
  for (;;) {
    if (sys::wait_for(pid, &status, __WALL) != pid) throw Error::from_errno("waitpid after exec");
    WaitStatus ws(status);
    if (ws.gone()) {
      proc->end_ = ws;
      check_exec_report(report, pid, spec);  // throws with the exec's errno when it failed
      throw Error("'" + spec.argv[0] + "' " + ws.describe() + " during its exec");
    }
    if (ws.ptrace_event() == PTRACE_EVENT_EXEC) break;
    // The SIGCONT (delivered: the program is not running yet), the re-reported group-stop.
    long sig = ws.signal_stop() ? ws.stop_signal() : 0;
    sys::ptrace_call(PTRACE_CONT, pid, nullptr, reinterpret_cast<void*>(sig));
  }
  report = Fd();  // the exec closed the child's end without writing: success
  // The exec event is reported from inside execve, which still stores its return value in
  // RAX when resumed: registers changed now (to inject a system call) would be overwritten.
  // Go on to execve's syscall-exit-stop, after which register changes hold.
  sys::ptrace_call(PTRACE_SYSCALL, pid, nullptr, nullptr);
  if (sys::wait_for(pid, &status, __WALL) != pid || !WaitStatus(status).syscall_stop()) {
    throw Error("'" + spec.argv[0] +
                "' did not leave its exec cleanly: " + WaitStatus(status).describe());
  }
  // The ProcMemory opened before the exec refers to the old address space.
  proc->space_.memory().reopen();
  proc->threads_.add(pid, Task::Role::Thread).note_stop(WaitStatus(status));
  return proc;
}

std::unique_ptr<TracedProcess> TracedProcess::attach(pid_t pid, EventSource& events,
                                                     bool with_guardian) {
  check_attachable(pid);
  // A leader that has exited alone cannot be seized (EPERM); its threads are traced without it.
  bool zombie_leader = stat_field(pid, 3) == "Z";
  if (!zombie_leader &&
      sys::ptrace_call(PTRACE_SEIZE, pid, nullptr, reinterpret_cast<void*>(kOptions)) < 0) {
    std::string why = std::strerror(errno);
    if (errno == EPERM) {
      why +=
          " (traced by another process already, owned by another user, or forbidden by "
          "kernel.yama.ptrace_scope)";
    }
    if (errno == ESRCH) {
      throw CannotTrace(pid, CannotTrace::Reason::NoProcess,
                        "no process with PID " + std::to_string(pid));
    }
    throw Error("cannot trace process " + std::to_string(pid) + ": " + why);
  }
  // A process that exits while we attach is as good as one that was not there, as for a PID
  // that names nothing.
  auto exited = [pid](const std::string& how) {
    return CannotTrace(
        pid, CannotTrace::Reason::NoProcess,
        "process " + std::to_string(pid) + " " + how + " while probecost was attaching");
  };
  std::unique_ptr<TracedProcess> proc;
  try {
    proc.reset(new TracedProcess(pid, false, events));  // opens /proc/PID/mem
  } catch (const Error&) {
    std::string state = stat_field(pid, 3);
    if (state.empty() || state == "Z" || state == "X") throw exited("exited");
    throw;
  }
  if (!zombie_leader) proc->threads_.add(pid, Task::Role::Thread);
  proc->seize_all_threads();
  if (proc->threads_.empty()) {
    throw CannotTrace(pid, CannotTrace::Reason::NoProcess,
                      "process " + std::to_string(pid) + " has exited");
  }
  // PTRACE_SEIZE does not stop anything: the guardian's fork (a copy of probecost's page
  // tables, which hold the symbols read already) is made while the process runs on.
  if (with_guardian) proc->start_guardian();
  proc->held_.start();
  proc->stop_all(0, true);
  proc->held_.mark("stopping the threads");
  if (proc->end_) throw exited(proc->end_->describe());
  // Before anything of ours borrows a thread: one a killed probecost left in its warm loop.
  proc->found_at_attach_ = finish_left_way_backs(*proc);
  proc->held_.mark("a killed probecost's way backs");
  return proc;
}

void TracedProcess::report_thread_exits() {
  // PTRACE_SETOPTIONS replaces them all: a launched process keeps PTRACE_O_EXITKILL.
  long options = kTraceOptions | PTRACE_O_TRACEEXIT | (launched_ ? PTRACE_O_EXITKILL : 0);
  for (auto& [tid, t] : threads_) {
    if (t.stopped() && t.runs_with_us()) t.set_options(options);
  }
}

void TracedProcess::seize_all_threads() {
  // Threads can be created while we go through /proc/PID/task; those made by a thread we have
  // seized are attached by the kernel (TRACECLONE), the others are found on the next pass.
  for (bool found = true; found;) {
    found = false;
    for (pid_t tid : task_ids(pid_)) {
      if (threads_.has(tid) || (tid == pid_ && stat_field(pid_, 3) == "Z")) continue;
      if (sys::ptrace_call(PTRACE_SEIZE, tid, nullptr, reinterpret_cast<void*>(kOptions)) < 0 &&
          errno != EPERM) {
        continue;  // ESRCH: exited meanwhile. EPERM: auto-attached already, so ours.
      }
      threads_.add(tid, Task::Role::Thread);
      found = true;
    }
  }
}

void TracedProcess::resume_after_exec() {
  // The exec event itself may have been kept for the event loop (seen while we waited for
  // something else): it is settled here, by running to the new entry point.
  for (auto& [tid, t] : threads_) t.deferred.reset();
  space_.clear();
  int3_area_.reset();  // the new image gets its own, with its first int3 probe
  int3_area_tried_ = false;
  semaphore_table_tried_ = false;
  semaphores_.clear();  // they went with the old address space
  exec_ended_ = false;
  // The guardian holds the old address space's /proc/PID/mem: a new one watches the new.
  if (guardian_) {
    guardian_->done();
    start_guardian();
  }
  run_to_entry();
}

void TracedProcess::run_to_entry() {
  std::ifstream auxv("/proc/" + std::to_string(pid_) + "/auxv", std::ios::binary);
  std::uint64_t kv[2], entry = 0;
  while (auxv.read(reinterpret_cast<char*>(kv), sizeof kv) && kv[0] != 0) {
    if (kv[0] == 9 /* AT_ENTRY */) entry = kv[1];
  }
  if (!entry) throw Error("no AT_ENTRY in /proc/" + std::to_string(pid_) + "/auxv");
  RuntimeAddr at(entry);
  space_.sites().add(at, "entry").enable();
  Task& leader = threads_.at(pid_);
  leader.resume();
  for (;;) {
    auto ws = wait_for(leader);
    if (!ws) {
      std::string how = end_ ? end_->describe() : std::string("ended");
      throw Error("process " + std::to_string(pid_) + " " + how +
                  " before reaching its entry point");
    }
    if (ws->signal_stop() && ws->stop_signal() == SIGTRAP && leader.rip() == at + 1) {
      leader.set_rip(at);
      space_.sites().remove(at);
      // The leader is in the SIGTRAP's signal-delivery-stop while the new image is probed
      // (seconds for a large one). A tracer that dies now lets it go with that SIGTRAP
      // delivered, and a program without a handler dies of it (once in a SIGKILL of probecost
      // following an exec under ASan). An interrupt stop holds no signal: it is parked there.
      park_at_interrupt(leader.ref());
      return;
    }
    if (ws->signal_stop()) leader.pending_signals.push_back(ws->stop_signal());
    leader.resume();
  }
}

}  // namespace probecost
