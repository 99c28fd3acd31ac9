#pragma once
// TracedProcess: the one owner of a process under ptrace. Made only by launch() (later also
// attach()); every way out (detach(), kill(), the destructor, an exception unwinding through the
// owner) removes our int3 bytes and rewinds a thread stopped on one before letting go.
#include <sys/types.h>

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
  bool stopped = false;         // in a ptrace-stop we know of and have not resumed
  bool expect_sigstop = false;  // a SIGSTOP is due: a new thread's first, or one we sent
  int pending_signal = 0;       // a signal for the thread, delivered at its next resume
  std::optional<int> queued_status;  // an event seen while stopping it, handled later
  std::uint64_t hits = 0;
};

// fork + exec with the spec's redirections and CPU; an exec failure is reported through a
// close-on-exec pipe and thrown here. With `traced`, the child is stopped at its exec (see
// TracedProcess::launch); otherwise it runs and the caller waits for it.
pid_t spawn(const LaunchSpec& spec, bool traced);

class TracedProcess {
 public:
  static std::unique_ptr<TracedProcess> launch(const LaunchSpec& spec);
  ~TracedProcess();
  TracedProcess(const TracedProcess&) = delete;
  TracedProcess& operator=(const TracedProcess&) = delete;

  pid_t pid() const { return pid_; }
  TraceeMemory& memory() { return memory_; }
  SiteTable& sites() { return sites_; }
  std::map<pid_t, ThreadState>& threads() { return threads_; }
  bool alive() const { return !end_.has_value() && !detached_; }
  bool detached() const { return detached_; }
  // How the process ended (its thread-group leader's final status), once it has.
  const std::optional<WaitStatus>& end() const { return end_; }

  // Bookkeeping for the event loop.
  void thread_gone(pid_t tid, WaitStatus status);
  void resume(pid_t tid);  // PTRACE_CONT, delivering the thread's pending signal
  // Brings every running thread but `except` into a ptrace-stop (tgkill SIGSTOP, then wait for
  // each). Events that arrive instead of our SIGSTOP are queued in the thread's state.
  void stop_all(pid_t except = 0);
  // Resumes the threads stop_all() stopped that have nothing queued.
  void resume_stopped(pid_t except = 0);

  // Maps one executable scratch page in the tracee, as close to `near` as possible (an mmap
  // injected into a stopped thread). The page stays until the process ends or unmap_scratch().
  RuntimeAddr map_scratch(RuntimeAddr near);

  // Puts back every original byte, rewinds threads stopped on our int3, and detaches: the
  // process runs on untraced. Idempotent.
  void detach();
  // SIGKILL and reap. Idempotent.
  void kill();

 private:
  explicit TracedProcess(pid_t pid, bool launched);
  void rewind_if_on_our_trap(pid_t tid, ThreadState& t);
  void adopt_queued_clone(pid_t tid, ThreadState& t);
  void drain_our_sigstop(pid_t tid, ThreadState& t);

  pid_t pid_;
  bool launched_;
  ProcMemory memory_;
  SiteTable sites_;
  std::map<pid_t, ThreadState> threads_;
  std::optional<WaitStatus> end_;
  bool detached_ = false;
  std::vector<RuntimeAddr> scratch_pages_;
};

}  // namespace probecost
