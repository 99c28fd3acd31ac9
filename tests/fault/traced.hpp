#pragma once
// A fault-suite cycle's `probecost trace` of one target, and its checks.
#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <vector>

#include "harness.hpp"

namespace fault {

inline constexpr const char* kProbe = "probe_fn";

inline std::string after_text(const Config& cfg, const std::string& event) {
  return fmt_seconds(cfg.bound) + " s after " + event;
}

// One trace of a target: attached by PID (the target is our child) or launched by probecost
// (the target is its child; commands go through probecost's stdin, lines come on its fd 3).
class Traced {
 public:
  static Traced attach(const Config& cfg, const Cycle& c, std::vector<std::string> target,
                       std::vector<std::string> more = {}, const std::string& probe = kProbe) {
    Traced t;
    t.attached_ = start_target(cfg, std::move(target));
    std::vector<std::string> args = {"-p", std::to_string(t.attached_->pid), "-b", probe};
    args.insert(args.end(), more.begin(), more.end());
    t.run_ = std::make_unique<TraceRun>(cfg, trace_args(c.strategy, args));
    return t;
  }
  static Traced launch(const Config& cfg, const Cycle& c, std::vector<std::string> target,
                       std::vector<std::string> more = {}, const std::string& probe = kProbe) {
    Traced t;
    t.launched_ = std::make_unique<TargetPipes>();
    target[0] = cfg.bin_dir + "/" + target[0];
    target.insert(target.end(), {"--ctl-fd", "3"});
    std::vector<std::string> args = {"-b", probe};
    args.insert(args.end(), more.begin(), more.end());
    args.push_back("--");
    args.insert(args.end(), target.begin(), target.end());
    t.run_ = std::make_unique<TraceRun>(cfg, trace_args(c.strategy, args), t.launched_->in.read,
                                        t.launched_->ctl.write);
    t.launched_->in.close_read();
    t.launched_->ctl.close_write();
    return t;
  }
  Traced(Traced&&) = default;
  ~Traced() {
    // A launched target is probecost's child, or ours once orphaned: never left running.
    if (launched_ && launched_->pid > 0) {
      launched_->kill();
      ::waitpid(launched_->pid, nullptr, __WALL);  // ECHILD unless orphaned to us
    }
  }

  bool is_launched() const { return launched_ != nullptr; }
  TraceRun& run() { return *run_; }
  TargetPipes& pipes() { return launched_ ? *launched_ : *attached_; }
  AttachedTarget& attached() { return *attached_; }
  pid_t pid() { return pipes().pid; }
  // The probes are in and the target runs.
  bool wait_traced(Deadline deadline) {
    return launched_ ? launched_->wait_ready(deadline) : run_->wait_tracing(deadline);
  }
  // wait_traced(), and if the probes are not in by then, the report lost, with the reason.
  bool traced_or_lost(Deadline deadline, Outcome& o) {
    if (wait_traced(deadline)) return true;
    o.lose("probecost never started tracing: " + run_->stderr_text());
    return false;
  }
  // The target's end line (a launched one says it before it exits), checked.
  std::optional<EndLine> check_launched_end(const Config& cfg, Outcome& o) {
    if (pipes().pid <= 0 && !pipes().wait_ready(after(cfg.bound))) return std::nullopt;
    auto end = read_end(pipes(), after(cfg.bound), o);
    if (end) {
      check_end(*end, o);
    } else {
      o.harm("the launched target ended without its end line");
    }
    return end;
  }
  // After probecost has ended: an attached target must be as it was, and end well.
  void check_attached(const Config& cfg, Outcome& o) {
    check_text(attached_->pid, o, "after detach");
    stop_and_check(*attached_, cfg, o);
  }
  // An attached target, traced: a round of `calls` calls, then SIGINT. The report must count
  // `hits`, and the target be as it was.
  void counted_round(const Config& cfg, int calls, std::uint64_t hits, Outcome& o) {
    pipes().send("go " + std::to_string(calls));
    auto done = pipes().wait_line("done", after(3 * cfg.bound));
    run_->signal(SIGINT);
    auto report = run_->finish(after(cfg.bound), o, after_text(cfg, "SIGINT"));
    if (!done) o.harm("the round of calls did not finish");
    if (report) check_hits(*report, hits, o);
    check_attached(cfg, o);
  }

 private:
  Traced() = default;
  std::unique_ptr<AttachedTarget> attached_;
  std::unique_ptr<TargetPipes> launched_;
  std::unique_ptr<TraceRun> run_;
};

}  // namespace fault
