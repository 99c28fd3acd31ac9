#include "tracer/process.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <fstream>

#include "breakpoint/error.hpp"
#include "breakpoint/outline.hpp"
#include "tracer/inject.hpp"
#include "tracer/maps.hpp"
#include "tracer/proc_files.hpp"
#include "tracer/syscalls.hpp"

namespace probecost {

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
    if (!ws.interrupt_stop()) {
      t.queued_status = status;
      queued_.push_back(tid);
    }
  }
}

std::optional<std::pair<pid_t, int>> TracedProcess::take_queued() {
  while (!queued_.empty()) {
    pid_t tid = queued_.front();
    queued_.pop_front();
    auto it = threads_.find(tid);
    // Entries whose event was handled elsewhere (detach) or whose thread is gone are stale.
    if (it == threads_.end() || !it->second.queued_status) continue;
    int status = *it->second.queued_status;
    it->second.queued_status.reset();
    return std::make_pair(tid, status);
  }
  return std::nullopt;
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
    // Ours until it execs or exits. Its first stop is consumed (here, or held as
    // awaiting_parent); the event loop resumes only the thread that reported an event (the
    // parent), so the child is resumed here, or the parent waits for it forever.
    ThreadState& t = threads_[child];
    t.vfork_child = true;
    t.awaiting_parent = false;
    t.stopped = true;
    resume(child);
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
