#pragma once
// TracedProcess: the one owner of a process under ptrace, made only by launch() or attach().
// Every way out (detach(), kill(), the destructor, an exception unwinding through the owner)
// removes our int3 bytes and rewinds a thread stopped on one before letting go.
//
// Every thread is attached with PTRACE_SEIZE (the launched child too, as strace does): unlike
// PTRACE_ATTACH/TRACEME, it lets us stop a thread with PTRACE_INTERRUPT instead of a SIGSTOP we
// must later swallow, and it tells a group-stop (a shell's SIGSTOP) from a signal, so the
// process can stay stopped under PTRACE_LISTEN as it would untraced.
#include <sys/resource.h>
#include <sys/types.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/site_table.hpp"
#include "tracer/memory.hpp"
#include "tracer/wait_status.hpp"

namespace probecost {

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  int stdin_fd = -1;              // dup2'd onto 0/1/2 in the child when >= 0
  int stdout_fd = -1;
  int stderr_fd = -1;
  int cpu = -1;  // pin the child to this CPU before exec when >= 0
};

struct ThreadState {
  bool stopped = false;              // in a ptrace-stop we know of and have not resumed
  bool listening = false;            // in a group-stop, parked with PTRACE_LISTEN
  bool vfork_child = false;          // a vfork child: shares the tracee's memory until exec or exit
  bool awaiting_parent = false;      // a fork child that reported before its parent's event
  int pending_signal = 0;            // a signal for the thread, delivered at its next resume
  std::optional<int> queued_status;  // an event seen while stopping it, handled later
  std::uint64_t hits = 0;
};

// fork + exec with the spec's redirections and CPU, untraced; an exec failure is reported
// through a close-on-exec pipe and thrown here. The caller waits for the child.
pid_t spawn(const LaunchSpec& spec);

class TracedProcess {
 public:
  // Starts the command, seized, stopped at its exec (before the dynamic loader has run).
  static std::unique_ptr<TracedProcess> launch(const LaunchSpec& spec);
  // Seizes every thread of a running process and stops them all. UsageError for a PID that
  // cannot be traced (none, a kernel thread, a zombie, no permission), with the reason.
  static std::unique_ptr<TracedProcess> attach(pid_t pid);
  ~TracedProcess();
  TracedProcess(const TracedProcess&) = delete;
  TracedProcess& operator=(const TracedProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool launched() const { return launched_; }
  TraceeMemory& memory() { return memory_; }
  SiteTable& sites() { return sites_; }
  std::map<pid_t, ThreadState>& threads() { return threads_; }
  bool alive() const { return !end_.has_value() && !detached_ && !exec_ended_; }
  bool detached() const { return detached_; }
  // How the process ended (its thread-group leader's final status), once it has.
  const std::optional<WaitStatus>& end() const { return end_; }
  // The CPU time the whole process has used so far (user + system), in seconds: from
  // /proc/PID/stat while it lives; for a launched process that ended, the growth of our
  // RUSAGE_CHILDREN (exact, and what is left once the process is reaped).
  double cpu_seconds() const;

  // Runs the stopped process until its executable's entry point (AT_ENTRY), so that the
  // libraries it needs at start-up are mapped; all threads are stopped again afterwards.
  void run_to_entry();

  // Bookkeeping for the event loop.
  void thread_gone(pid_t tid, WaitStatus status);
  void resume(pid_t tid);  // PTRACE_CONT, delivering the thread's pending signal
  void listen(pid_t tid);  // PTRACE_LISTEN: stays in group-stop, reports SIGCONT
  // Brings every running thread but `except` into a ptrace-stop with PTRACE_INTERRUPT. Events
  // that arrive instead of the interrupt's stop are queued in the thread's state.
  void stop_all(pid_t except = 0, bool include_listening = false);
  // Resumes the threads stop_all() stopped that have nothing queued.
  void resume_stopped(pid_t except = 0);
  // The oldest event queued by stop_all() and not handled yet, removed from its thread.
  // Kept in a list, so the event loop does not scan every thread on every event.
  std::optional<std::pair<pid_t, int>> take_queued();
  // A fork/vfork child reported by the kernel (auto-attached). A fork child gets our int3 bytes
  // removed from its copy of the text and is let go; a vfork child shares our memory, so it is
  // kept as a thread of ours until it execs or exits.
  void adopt_child(pid_t child, bool vfork);
  // A tracked vfork child exec'd: it has its own memory now and is let go.
  void release_vfork_child(pid_t child);
  // True when `tid` is not a thread of this process (a fork child that reported first).
  bool is_foreign(pid_t tid) const;
  // The leader exec'd: the address space and our int3 bytes with it are gone.
  void exec_happened();

  // Maps one executable scratch page in the tracee, as close to `near` as possible (an mmap
  // injected into a stopped thread). It stays mapped after detach, as the kernel's uprobes
  // leave their [uprobes] page: a thread may still be executing a copy in it.
  RuntimeAddr map_scratch(RuntimeAddr near);

  // Puts back every original byte, rewinds threads stopped on our int3, and detaches: the
  // process runs on untraced. Idempotent.
  void detach();
  // SIGKILL and reap. Idempotent.
  void kill();

 private:
  TracedProcess(pid_t pid, bool launched);
  void seize_all_threads();
  void rewind_if_on_our_trap(pid_t tid, ThreadState& t);
  void adopt_queued_children();
  pid_t any_stopped_thread() const;

  pid_t pid_;
  bool launched_;
  ProcMemory memory_;
  SiteTable sites_;
  std::map<pid_t, ThreadState> threads_;
  std::optional<WaitStatus> end_;
  std::optional<double> end_cpu_seconds_;
  double children_cpu_at_launch_ = 0;
  bool detached_ = false;
  bool exec_ended_ = false;
  std::vector<RuntimeAddr> scratch_pages_;
  std::deque<pid_t> queued_;  // threads given a queued_status, oldest first
};

}  // namespace probecost
