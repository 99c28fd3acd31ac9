#include "tracer/process.hpp"

#include <dirent.h>
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
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "breakpoint/error.hpp"
#include "breakpoint/outline.hpp"
#include "tracer/inject.hpp"
#include "tracer/maps.hpp"
#include "tracer/syscalls.hpp"

namespace probecost {

namespace {

// CLONE: new threads start traced, stopped, so none runs past a site unseen. FORK/VFORK: a
// child would otherwise inherit our int3 bytes with nobody to handle them. EXEC: an event,
// not a stray SIGTRAP; it replaces the address space.
constexpr long kOptions = PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK |
                          PTRACE_O_TRACEEXEC | PTRACE_O_TRACESYSGOOD;

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
  if (spec.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(spec.cpu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) < 0) fail(2);
  }
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
    case 1: return "redirect standard streams";
    case 2: return "pin to the requested CPU";
    default: return "exec";
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
  throw UsageError("cannot launch '" + name + "': no such program in PATH");
}

pid_t fork_child(const LaunchSpec& spec, bool stop_first, int& report_fd) {
  if (spec.argv.empty()) throw UsageError("no command to launch");
  std::string program = find_program(spec.argv[0]);
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv[0] = program.data();
  argv.push_back(nullptr);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) < 0) throw Error::from_errno("pipe2");
  pid_t pid = ::fork();
  if (pid < 0) throw Error::from_errno("fork");
  if (pid == 0) child_exec(spec, stop_first, argv.data(), report[1]);
  ::close(report[1]);
  report_fd = report[0];
  return pid;
}

// Reads the child's report: nothing (EOF) means its exec succeeded.
void check_exec_report(int fd, pid_t pid, const LaunchSpec& spec) {
  int msg[2];
  ssize_t n;
  do n = ::read(fd, msg, sizeof msg);
  while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof msg)) return;
  ::kill(pid, SIGKILL);
  int status;
  while (::waitpid(pid, &status, __WALL) == pid && !WaitStatus(status).gone()) {
  }
  throw Error::from_errno("cannot launch '" + spec.argv[0] + "' (" + launch_step_name(msg[0]) + ")",
                          msg[1]);
}

// Field `n` (1-based, as in proc(5)) of /proc/PID/stat; empty if the process is gone.
std::string stat_field(pid_t pid, int n) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');  // comm may contain spaces and parentheses
  if (close == std::string::npos) return {};
  std::istringstream rest(stat.substr(close + 2));
  std::string f;
  for (int i = 3; i <= n && rest >> f; ++i) {
  }
  return f;
}

std::vector<pid_t> task_ids(pid_t pid) {
  std::vector<pid_t> tids;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') tids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
    }
    ::closedir(d);
  }
  return tids;
}

bool is_group_stop(WaitStatus ws) {
  if (ws.ptrace_event() != PTRACE_EVENT_STOP) return false;
  int s = ws.stop_signal();
  return s == SIGSTOP || s == SIGTSTP || s == SIGTTIN || s == SIGTTOU;
}

// PTRACE_EVENT_STOP with SIGTRAP: the stop PTRACE_INTERRUPT asked for, or a new thread's
// first. It carries no signal: resuming it is always safe.
bool is_plain_interrupt(WaitStatus ws) {
  return ws.ptrace_event() == PTRACE_EVENT_STOP && !is_group_stop(ws);
}

void check_attachable(pid_t pid) {
  std::string p = std::to_string(pid);
  if (pid <= 0) throw UsageError("bad PID " + p);
  if (pid == ::getpid()) throw UsageError("process " + p + " is probecost itself");
  if (::kill(pid, 0) < 0 && errno == ESRCH) throw UsageError("no process with PID " + p);
  std::string state = stat_field(pid, 3);
  if (state.empty()) throw UsageError("no process with PID " + p);
  if (state == "Z") {
    throw UsageError("process " + p + " is a zombie: it has exited and only waits to be reaped");
  }
  constexpr unsigned long kPfKthread = 0x00200000;  // include/linux/sched.h
  if (std::stoul(stat_field(pid, 9)) & kPfKthread) {
    throw UsageError("process " + p + " is a kernel thread: it has no user space to probe");
  }
}

double children_cpu_seconds() {
  rusage ru;
  ::getrusage(RUSAGE_CHILDREN, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

}  // namespace

pid_t spawn(const LaunchSpec& spec) {
  int report;
  pid_t pid = fork_child(spec, false, report);
  check_exec_report(report, pid, spec);
  return pid;
}

TracedProcess::TracedProcess(pid_t pid, bool launched)
    : pid_(pid), launched_(launched), memory_(pid), sites_(memory_) {}

std::unique_ptr<TracedProcess> TracedProcess::launch(const LaunchSpec& spec) {
  double children_cpu = children_cpu_seconds();
  int report;
  pid_t pid = fork_child(spec, true, report);
  int status = 0;
  if (::waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) {
    check_exec_report(report, pid, spec);  // it failed before its exec: say why
    throw Error("'" + spec.argv[0] + "' " + WaitStatus(status).describe() + " before its exec");
  }
  // EXITKILL: if probecost dies, a half-instrumented launched program must not run on.
  if (sys::ptrace_call(PTRACE_SEIZE, pid, nullptr,
                       reinterpret_cast<void*>(kOptions | PTRACE_O_EXITKILL)) < 0) {
    int err = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    throw Error::from_errno("cannot trace '" + spec.argv[0] + "' (PTRACE_SEIZE)", err);
  }
  // Seizing a stopped task re-traps it into a ptrace-stop that SIGCONT alone cannot end: it is
  // resumed below, and the exec report is read only once the exec has happened or failed.
  ::kill(pid, SIGCONT);
  std::unique_ptr<TracedProcess> proc(new TracedProcess(pid, true));
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
  ::close(report);  // the exec closed the child's end without writing: success
  // The exec event is reported from inside execve, which still stores its return value in
  // RAX when resumed: registers changed now (to inject a system call) would be overwritten.
  // Go on to execve's syscall-exit-stop, after which register changes hold.
  sys::ptrace_call(PTRACE_SYSCALL, pid, nullptr, nullptr);
  if (sys::wait_for(pid, &status, __WALL) != pid || !WaitStatus(status).syscall_stop()) {
    throw Error("'" + spec.argv[0] + "' did not leave its exec cleanly: " +
                WaitStatus(status).describe());
  }
  // The ProcMemory opened before the exec refers to the old address space.
  proc->memory_.reopen();
  proc->threads_[pid].stopped = true;
  return proc;
}

std::unique_ptr<TracedProcess> TracedProcess::attach(pid_t pid) {
  check_attachable(pid);
  if (sys::ptrace_call(PTRACE_SEIZE, pid, nullptr, reinterpret_cast<void*>(kOptions)) < 0) {
    std::string why = std::strerror(errno);
    if (errno == EPERM) {
      why += " (traced by another process already, owned by another user, or forbidden by "
             "kernel.yama.ptrace_scope)";
    }
    throw UsageError("cannot trace process " + std::to_string(pid) + ": " + why);
  }
  std::unique_ptr<TracedProcess> proc(new TracedProcess(pid, false));
  proc->threads_[pid];
  proc->seize_all_threads();
  proc->stop_all(0, true);
  return proc;
}

void TracedProcess::seize_all_threads() {
  // Threads can be created while we go through /proc/PID/task; those made by a thread we have
  // seized are attached by the kernel (TRACECLONE), the others are found on the next pass.
  for (bool found = true; found;) {
    found = false;
    for (pid_t tid : task_ids(pid_)) {
      if (threads_.count(tid)) continue;
      if (sys::ptrace_call(PTRACE_SEIZE, tid, nullptr, reinterpret_cast<void*>(kOptions)) < 0 &&
          errno != EPERM) {
        continue;  // ESRCH: exited meanwhile. EPERM: auto-attached already, so ours.
      }
      threads_[tid];
      found = true;
    }
  }
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

double TracedProcess::cpu_seconds() const {
  if (end_cpu_seconds_) return *end_cpu_seconds_;
  std::string utime = stat_field(pid_, 14), stime = stat_field(pid_, 15);
  if (utime.empty() || stime.empty()) return 0;
  return static_cast<double>(std::stoull(utime) + std::stoull(stime)) / sysconf(_SC_CLK_TCK);
}

void TracedProcess::thread_gone(pid_t tid, WaitStatus status) {
  threads_.erase(tid);
  if (tid != pid_) return;
  end_ = status;
  if (launched_) end_cpu_seconds_ = children_cpu_seconds() - children_cpu_at_launch_;
  sites_.forget_all();
  // Only vfork children (other processes) can outlive the leader's report.
  std::erase_if(threads_, [](const auto& kv) { return !kv.second.vfork_child; });
}

void TracedProcess::resume(pid_t tid) {
  ThreadState& t = threads_.at(tid);
  long sig = t.pending_signal;
  t.pending_signal = 0;
  t.stopped = false;
  t.listening = false;
  if (sys::ptrace_call(PTRACE_CONT, tid, nullptr, reinterpret_cast<void*>(sig)) < 0 &&
      errno != ESRCH) {
    throw Error::from_errno("PTRACE_CONT thread " + std::to_string(tid));
  }
  // ESRCH: the thread was killed meanwhile (SIGKILL needs no tracer consent); its exit is
  // reported by waitpid later.
}

void TracedProcess::listen(pid_t tid) {
  ThreadState& t = threads_.at(tid);
  t.stopped = false;
  t.listening = true;
  sys::ptrace_call(PTRACE_LISTEN, tid, nullptr, nullptr);
}

void TracedProcess::stop_all(pid_t except, bool include_listening) {
  std::vector<pid_t> waiting;
  for (auto& [tid, t] : threads_) {
    if (tid == except || t.stopped || (t.listening && !include_listening)) continue;
    if (sys::ptrace_call(PTRACE_INTERRUPT, tid, nullptr, nullptr) == 0) waiting.push_back(tid);
  }
  for (pid_t tid : waiting) {
    int status = 0;
    if (sys::wait_for(tid, &status, __WALL) != tid) continue;
    WaitStatus ws(status);
    if (ws.gone()) {
      thread_gone(tid, ws);
      continue;
    }
    ThreadState& t = threads_[tid];
    t.stopped = true;
    t.listening = false;
    // Anything but the interrupt's own stop (a breakpoint hit, a signal, a clone, a
    // group-stop) is kept for the event loop. The interrupt then stays pending and shows up
    // later as a plain PTRACE_EVENT_STOP, which is simply resumed.
    if (!is_plain_interrupt(ws)) t.queued_status = status;
  }
}

void TracedProcess::resume_stopped(pid_t except) {
  for (auto& [tid, t] : threads_) {
    if (tid != except && t.stopped && !t.queued_status) resume(tid);
  }
}

bool TracedProcess::is_foreign(pid_t tid) const {
  std::ifstream in("/proc/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Tgid:", 0) == 0) return std::stoi(line.substr(5)) != pid_;
  }
  return false;
}

void TracedProcess::adopt_child(pid_t child, bool vfork) {
  auto known = threads_.find(child);
  if (known == threads_.end() || !known->second.stopped) {
    // Its first stop may already have been consumed (if it came before the parent's event);
    // otherwise wait for it: the child runs nothing before it.
    int status = 0;
    if (known == threads_.end() && sys::wait_for(child, &status, __WALL) != child) return;
  }
  if (vfork) {
    ThreadState& t = threads_[child];
    t.vfork_child = true;
    t.awaiting_parent = false;
    t.stopped = true;
    return;
  }
  // A forked child has its own copy of our int3 bytes: put the originals back and let it go.
  ProcMemory child_memory(child);
  for (const auto& site : sites_) {
    if (site->enabled()) child_memory.write_byte(site->address(), site->saved_byte());
  }
  threads_.erase(child);
  sys::ptrace_call(PTRACE_DETACH, child, nullptr, nullptr);
}

void TracedProcess::release_vfork_child(pid_t child) {
  threads_.erase(child);
  sys::ptrace_call(PTRACE_DETACH, child, nullptr, nullptr);
}

void TracedProcess::exec_happened() {
  sites_.forget_all();
  exec_ended_ = true;
}

pid_t TracedProcess::any_stopped_thread() const {
  for (const auto& [tid, t] : threads_) {
    if (t.stopped && !t.queued_status && !t.vfork_child) return tid;
  }
  return 0;
}

void TracedProcess::run_to_entry() {
  std::ifstream auxv("/proc/" + std::to_string(pid_) + "/auxv", std::ios::binary);
  std::uint64_t kv[2], entry = 0;
  while (auxv.read(reinterpret_cast<char*>(kv), sizeof kv) && kv[0] != 0) {
    if (kv[0] == 9 /* AT_ENTRY */) entry = kv[1];
  }
  if (!entry) throw Error("no AT_ENTRY in /proc/" + std::to_string(pid_) + "/auxv");
  RuntimeAddr at(entry);
  sites_.add(at, "entry").enable();
  resume(pid_);
  for (;;) {
    int status = 0;
    if (sys::wait_for(pid_, &status, __WALL) != pid_) throw Error::from_errno("waitpid");
    WaitStatus ws(status);
    if (ws.gone()) {
      thread_gone(pid_, ws);
      throw Error("process " + std::to_string(pid_) + " " + ws.describe() +
                  " before reaching its entry point");
    }
    threads_[pid_].stopped = true;
    if (ws.signal_stop() && ws.stop_signal() == SIGTRAP) {
      errno = 0;
      long rip = sys::ptrace_call(PTRACE_PEEKUSER, pid_,
                                  reinterpret_cast<void*>(offsetof(struct user, regs.rip)));
      if (static_cast<std::uint64_t>(rip) - 1 == entry) {
        sys::ptrace_call(PTRACE_POKEUSER, pid_,
                         reinterpret_cast<void*>(offsetof(struct user, regs.rip)),
                         reinterpret_cast<void*>(entry));
        sites_.remove(at);
        return;
      }
    }
    if (ws.signal_stop()) threads_[pid_].pending_signal = ws.stop_signal();
    resume(pid_);
  }
}

RuntimeAddr TracedProcess::map_scratch(RuntimeAddr near) {
  pid_t tid = any_stopped_thread();
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

void TracedProcess::rewind_if_on_our_trap(pid_t tid, ThreadState& t) {
  if (!t.queued_status) return;
  WaitStatus ws(*t.queued_status);
  if (!ws.signal_stop() || ws.stop_signal() != SIGTRAP) return;
  siginfo_t info;
  if (sys::ptrace_call(PTRACE_GETSIGINFO, tid, nullptr, &info) < 0) return;
  if (classify_trap(info) != TrapCause::Breakpoint) return;
  errno = 0;
  long rip = sys::ptrace_call(PTRACE_PEEKUSER, tid,
                              reinterpret_cast<void*>(offsetof(struct user, regs.rip)));
  if (rip == -1 && errno) return;
  RuntimeAddr at(static_cast<std::uint64_t>(rip) - 1);
  // Ours if a site is there (or was: a byte that is no longer int3). A program's own int3
  // leaves 0xCC in memory: its SIGTRAP is the program's and is delivered at detach.
  if (sites_.find(at) || memory_.read_byte(at) != kInt3) {
    sys::ptrace_call(PTRACE_POKEUSER, tid, reinterpret_cast<void*>(offsetof(struct user, regs.rip)),
                     reinterpret_cast<void*>(at.value()));
  } else {
    t.pending_signal = SIGTRAP;
  }
  t.queued_status.reset();
}

void TracedProcess::adopt_queued_children() {
  // Clone/fork events seen while stopping everything: their children exist and are traced.
  std::vector<std::pair<pid_t, int>> events;
  for (auto& [tid, t] : threads_) {
    if (!t.queued_status) continue;
    int event = WaitStatus(*t.queued_status).ptrace_event();
    if (event == PTRACE_EVENT_CLONE || event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK) {
      events.emplace_back(tid, event);
      t.queued_status.reset();
    }
  }
  for (auto [tid, event] : events) {
    unsigned long child = 0;
    if (sys::ptrace_call(PTRACE_GETEVENTMSG, tid, nullptr, &child) < 0) continue;
    pid_t c = static_cast<pid_t>(child);
    if (event == PTRACE_EVENT_CLONE) {
      int status;
      if (!threads_.count(c) && sys::wait_for(c, &status, __WALL) == c) threads_[c].stopped = true;
    } else {
      adopt_child(c, event == PTRACE_EVENT_VFORK);
    }
  }
}

void TracedProcess::detach() {
  if (detached_ || end_) return;
  stop_all(0, true);
  adopt_queued_children();
  for (auto& [tid, t] : threads_) rewind_if_on_our_trap(tid, t);
  if (!exec_ended_) sites_.disable_all();
  for (auto& [tid, t] : threads_) {
    long sig = t.pending_signal;
    if (t.queued_status) {
      WaitStatus ws(*t.queued_status);
      if (ws.signal_stop()) sig = ws.stop_signal();  // the signal it was stopped with
      t.queued_status.reset();
    }
    // The signal goes with PTRACE_DETACH's data. A thread in group-stop stays stopped: the
    // kernel puts a detached thread of a stopped group back into the group-stop.
    sys::ptrace_call(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(sig));
  }
  threads_.clear();
  detached_ = true;
}

void TracedProcess::kill() {
  if (!alive() && threads_.empty()) return;
  if (!exec_ended_ && !end_) {
    try {
      sites_.disable_all();  // for the vfork children that share the memory
    } catch (const std::exception&) {
    }
  }
  for (const auto& [tid, t] : threads_) {
    if (t.vfork_child) ::kill(tid, SIGKILL);
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  // Reap every thread: with __WALL each traced thread reports its own exit.
  while (!threads_.empty()) {
    pid_t r = ::waitpid(-1, &status, __WALL);
    if (r < 0) break;
    if (WaitStatus(status).gone()) thread_gone(r, WaitStatus(status));
  }
  if (!end_) end_ = WaitStatus(status);
}

}  // namespace probecost
