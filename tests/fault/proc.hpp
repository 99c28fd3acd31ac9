#pragma once
// Processes for the fault suite: started with chosen fds, waited for with a deadline (pidfd +
// poll, never a sleep), read line by line with a deadline, and always reaped.
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace fault {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}
double seconds_since(Clock::time_point t);

// Waits, without sleeping in a loop, for `seconds` (the random delay of a fault injection).
void pause_for(double seconds);

// A pipe whose ends are closed on destruction.
struct Pipe {
  Pipe();
  ~Pipe();
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void close_read();
  void close_write();
  int read = -1, write = -1;
};

// Lines from a fd, with a deadline for each.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // The next line (without '\n'); nullopt at EOF or when the deadline passes first.
  std::optional<std::string> next(Deadline deadline);
  // Everything read so far (for error messages).
  const std::string& seen() const { return seen_; }
  bool eof() const { return eof_; }

 private:
  int fd_;
  std::string buf_, seen_;
  bool eof_ = false;
};

struct SpawnFds {
  int in = -1, out = -1, err = -1;  // dup2'd onto 0, 1, 2 when >= 0 (else /dev/null)
  int ctl = -1;                     // dup2'd onto 3 when >= 0, left open across exec
  // The child stops itself (SIGSTOP) just before its exec, so that perf events can be bound
  // to it before the program runs (Child::wait_stopped, then SIGCONT).
  bool stop_before_exec = false;
};

// A child process; killed (SIGKILL) and reaped on destruction if still there.
class Child {
 public:
  Child() = default;
  Child(const std::vector<std::string>& argv, const SpawnFds& fds);
  ~Child();
  Child(Child&& o) noexcept;
  Child& operator=(Child&& o) noexcept;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_; }
  // Its wait status once it has ended, waiting until `deadline` at most.
  std::optional<int> wait(Deadline deadline);
  void signal(int sig) const;
  // SIGKILL and reap.
  int kill();
  // True once the child is in a group-stop (waitpid WUNTRACED), waiting until `deadline`.
  bool wait_stopped(Deadline deadline);
  const std::optional<int>& status() const { return status_; }

 private:
  void release();
  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::optional<int> status_;
};

// "exited 0", "killed by SIGTRAP", ...
std::string describe_status(int status);
// The state letter of /proc/PID/stat ('R', 'S', 'T', 't', 'Z'), '?' when gone.
char proc_state(pid_t pid);
// The state letters of every thread of `pid`, e.g. "TTR".
std::string thread_states(pid_t pid);
// True when every thread of `pid` is in the given state.
bool all_threads_in_state(pid_t pid, char state);
// Waits until `pred` holds (polling /proc, which the kernel changes with no notification we
// can wait on) or the deadline passes.
template <typename F>
bool poll_until(F&& pred, Deadline deadline) {
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    pause_for(0.0002);  // not sched_yield: a spinning driver would slow what it waits for
  }
  return true;
}

// The directory of this executable: the suites find probecost and their targets beside it.
std::string self_dir();
// The last line of `text` that has anything in it (the reason in a program's stderr).
std::string last_line(const std::string& text);

// Makes this process the reaper of its orphaned descendants, and reaps those that ended.
void become_subreaper();
void reap_orphans();

}  // namespace fault
