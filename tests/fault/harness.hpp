#pragma once
// The pieces a scenario is made of: a target talked to on its pipes, a running
// `probecost trace`, and the checks of a cycle's end.
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "proc.hpp"
#include "scenario.hpp"

namespace fault {

// KEY=VALUE fields of a target's "end ..." line.
using EndLine = std::map<std::string, std::string>;

// A target's two channels: commands to its stdin, its lines from the control pipe.
struct TargetPipes {
  Pipe in, ctl;
  LineReader lines{-1};
  pid_t pid = -1;  // from its "ready PID" line
  // Taken when it says ready: signals go through it, never to a PID that may be reused by
  // then (threads churning elsewhere on the machine wrap a 32768 PID space in seconds).
  probecost::Fd pidfd;
  // SIGKILL through pidfd (nothing when it never said ready or is gone).
  void kill() const;
  TargetPipes();
  // Writes one command line (a target that is gone is not an error here).
  void send(const std::string& line);
  // Waits for "ready PID"; false when it does not come before the deadline.
  bool wait_ready(Deadline deadline);
  // Reads lines until one starts with `prefix`; nullopt at EOF or the deadline.
  std::optional<std::string> wait_line(const std::string& prefix, Deadline deadline);
};

// A target started by us (for -p PID).
struct AttachedTarget : TargetPipes {
  Child child;
};
std::unique_ptr<AttachedTarget> start_target(const Config& cfg, std::vector<std::string> argv);

// A running `probecost trace -f json ARGS`, its report captured in a memory file.
class TraceRun {
 public:
  // `in` and `ctl` (when >= 0) become probecost's stdin and fd 3, inherited by a launched
  // target.
  TraceRun(const Config& cfg, const std::vector<std::string>& args, int in = -1, int ctl = -1);
  ~TraceRun();
  // Waits for the "tracing process" line on its stderr.
  bool wait_tracing(Deadline deadline);
  // Waits until probecost catches SIGINT, SIGTERM and SIGHUP (SigCgt in /proc/PID/status):
  // before that, in the dynamic loader's work, no program can catch a signal. The time it took
  // from the fork is added to handler_window_ms().
  bool wait_handlers(Deadline deadline);
  pid_t pid() const { return child_.pid(); }
  void signal(int sig) { child_.signal(sig); }
  // Waits for probecost to end by `deadline`; if it does not, counts a hang, sends SIGINT, and
  // SIGKILL a second later if it ignores that too. Then checks exit code and report (a report
  // lost unless `allowed_exit` covers the code).
  std::optional<nlohmann::json> finish(Deadline deadline, Outcome& o, const std::string& what,
                                       const std::vector<int>& allowed_exit = {});
  // SIGKILL, reaped.
  void kill() { child_.kill(); }
  const std::string& stderr_text();

 private:
  Child child_;
  Clock::time_point started_ = Clock::now();
  Pipe err_;
  LineReader err_lines_{-1};
  int out_ = -1;  // memfd
  std::string stderr_;
};

std::vector<std::string> trace_args(const std::string& strategy, std::vector<std::string> more);

// Parses "end k=v k=v"; nullopt when the line is not there by the deadline.
std::optional<EndLine> read_end(TargetPipes& t, Deadline deadline, Outcome& o);
// Checks an end line: no wrong result, no stray SIGTRAP, text equal to the files.
void check_end(const EndLine& end, Outcome& o);
// The target's text against its ELF files, now.
void check_text(pid_t pid, Outcome& o, const std::string& when);
// Asks an attached target to stop, checks its end line and that it exited 0; the end line.
std::optional<EndLine> stop_and_check(AttachedTarget& t, const Config& cfg, Outcome& o);
// A launched target's end as probecost reports it ("exited with status 0").
void check_command_end(const nlohmann::json& report, Outcome& o);
// Counts: the report's hits against what the target counted.
void check_hits(const nlohmann::json& report, std::uint64_t expected, Outcome& o);

std::string fmt_seconds(double s);
// Every wait_handlers() time, in ms.
std::vector<double>& handler_window_ms();

}  // namespace fault
