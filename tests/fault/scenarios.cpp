// The scenarios of the fault-injection suite. Each cycle starts its own target, attacks one
// `probecost trace` run, and checks the target, the report and the counts afterwards.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cycles.hpp"
#include "harness.hpp"
#include "text_check.hpp"
#include "traced.hpp"

namespace fault {

namespace {

int random_stop_signal(const Cycle& c) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  return sigs[c.below(3)];
}

}  // namespace

Outcome attach_for_duration(const Config& cfg, const Cycle& c, std::vector<std::string> target,
                            double d) {
  Outcome o;
  auto t = Traced::attach(cfg, c, std::move(target), {"--duration", fmt_seconds(d)});
  // --duration counts from the moment the probes are in, announced by the "tracing process"
  // line: the time to start (much longer in a sanitizer build) and attach is not an overshoot.
  // If it never says so (it failed, or the target went away), finish() judges the end.
  t.run().wait_tracing(after(cfg.bound + 10));
  t.run().finish(after(d + cfg.bound), o, after_text(cfg, "--duration " + fmt_seconds(d)));
  t.check_attached(cfg, o);
  return o;
}

// SIGINT, SIGTERM or SIGHUP at a random moment from the time probecost can catch them (often
// before the probes are in), and in a third of the cycles a second one soon after. The report
// must still come, with exit 0.
Outcome signal_cycle(const Config& cfg, const Cycle& c, bool launched, bool second) {
  Outcome o;
  o.faults = 0;
  auto t = launched ? Traced::launch(cfg, c, {"fault_busy", "--calls", "20000"})
                    : Traced::attach(cfg, c, {"fault_busy", "--threads", "2"});
  // From the moment probecost can catch them: before, in the dynamic loader, nothing can.
  if (!t.run().wait_handlers(after(cfg.bound))) {
    o.lose("probecost never installed its SIGINT/SIGTERM/SIGHUP handlers");
  }
  pause_for(c.uniform(0, 0.08));
  t.run().signal(random_stop_signal(c));
  ++o.faults;
  if (second) {
    pause_for(c.uniform(0, 0.005));
    t.run().signal(random_stop_signal(c));
    ++o.faults;
  }
  // A launched target runs on, untraced, to its end, which probecost waits for.
  t.run().finish(after(cfg.bound + (launched ? 10 : 0)), o, after_text(cfg, "the signal"));
  if (launched) {
    t.check_launched_end(cfg, o);
  } else {
    t.check_attached(cfg, o);
  }
  return o;
}

// exit() from the main thread or a hitting thread, a random moment after the probes are in.
Outcome exit_cycle(const Config& cfg, const Cycle& c, bool launched, bool from_thread,
                   unsigned threads) {
  Outcome o;
  std::vector<std::string> target = {"fault_exit", "--threads", std::to_string(threads), "--from",
                                     from_thread ? "thread" : "main"};
  auto t = launched ? Traced::launch(cfg, c, target) : Traced::attach(cfg, c, target);
  if (!t.traced_or_lost(after(cfg.start_bound), o)) return o;
  pause_for(c.uniform(0, 0.03));
  t.pipes().send("exit");
  auto report = t.run().finish(after(cfg.bound), o, after_text(cfg, "the process exited"));
  auto end = read_end(t.pipes(), after(cfg.bound), o);
  if (end) check_end(*end, o);
  if (launched) {
    if (report) check_command_end(*report, o);
  } else if (auto status = t.attached().child.wait(after(cfg.bound))) {
    if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
      o.harm("the target " + describe_status(*status));
    }
  } else {
    o.harm("the target did not end after exit()");
  }
  return o;
}

// The process exits while probecost is attaching to it. Exit 2 ("no such process") is a fair
// answer when it was gone first; otherwise a report, exit 0.
Outcome exit_during_attach(const Config& cfg, const Cycle& c) {
  Outcome o;
  auto target = start_target(cfg, {"fault_exit", "--threads", "3"});
  TraceRun run(cfg, trace_args(c.strategy, {"-p", std::to_string(target->pid), "-b", kProbe}));
  pause_for(c.uniform(0, 0.004));
  target->send("exit");
  run.finish(after(cfg.bound), o, after_text(cfg, "the process exited"), {2});
  auto end = read_end(*target, after(cfg.bound), o);
  if (end) check_end(*end, o);
  auto status = target->child.wait(after(cfg.bound));
  if (!status) {
    o.harm("the target did not end after exit()");
  } else if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    o.harm("the target " + describe_status(*status));
  }
  return o;
}

// exec from the main thread or from a hitting thread (which becomes the leader).
Outcome exec_cycle(const Config& cfg, const Cycle& c, bool launched, bool from_thread) {
  Outcome o;
  std::vector<std::string> target = {"fault_exec", "--threads", "3", "--from",
                                     from_thread ? "thread" : "main"};
  auto t = launched ? Traced::launch(cfg, c, target) : Traced::attach(cfg, c, target);
  if (!t.traced_or_lost(after(cfg.start_bound), o)) return o;
  pause_for(c.uniform(0, 0.03));
  t.pipes().send("exec");
  t.run().finish(after(cfg.bound), o, after_text(cfg, "the process exec'd"));
  auto end = read_end(t.pipes(), after(cfg.bound), o);
  if (end) check_end(*end, o);
  if (!t.pipes().wait_line("exec-ok", after(cfg.bound))) {
    o.harm("the exec'd program never said exec-ok");
  }
  if (!launched) {
    auto status = t.attached().child.wait(after(cfg.bound));
    if (!status) {
      o.harm("the exec'd program did not end");
    } else if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
      o.harm("the exec'd program " + describe_status(*status));
    }
  }
  return o;
}

// Children made while hit. Attached (even cycles): for a random --duration, then checked.
// Launched (odd cycles): a known number of calls, which must all be counted (the calls of
// vfork and CLONE_VM children, which run in the traced memory, included).
Outcome children_cycle(const Config& cfg, const Cycle& c, const std::string& mode, bool launched) {
  Outcome o;
  if (!launched) {
    double d = c.uniform(0.02, 0.12);
    auto t = Traced::attach(cfg, c, {"fault_fork", "--mode", mode}, {"--duration", fmt_seconds(d)});
    t.run().finish(after(d + cfg.bound), o, after_text(cfg, "--duration " + fmt_seconds(d)));
    t.check_attached(cfg, o);
    return o;
  }
  auto t = Traced::launch(
      cfg, c,
      {"fault_fork", "--mode", mode, "--rounds", "20", "--calls", "2000", "--child-calls", "20"});
  auto report = t.run().finish(after(3 * cfg.bound), o, after_text(cfg, "the command's start"));
  auto end = t.check_launched_end(cfg, o);
  if (report) {
    check_command_end(*report, o);
    if (end) check_hits(*report, std::stoull((*end)["calls"]), o);
  }
  o.faults = 20;
  return o;
}

// The same with -F: every child is traced as a process of its own, and let go (or ends) intact.
// Launched: the children's calls are counted too (a fork child's in its own copy).
Outcome follow_cycle(const Config& cfg, const Cycle& c, const std::string& mode, bool launched,
                     const std::vector<std::string>& target_args) {
  Outcome o;
  if (!launched) {
    double d = c.uniform(0.02, 0.12);
    std::vector<std::string> target = {"fault_fork", "--mode", mode};
    target.insert(target.end(), target_args.begin(), target_args.end());
    auto t = Traced::attach(cfg, c, target, {"-F", "--duration", fmt_seconds(d)});
    t.run().finish(after(d + cfg.bound), o, after_text(cfg, "-F --duration " + fmt_seconds(d)));
    t.check_attached(cfg, o);
    return o;
  }
  auto t = Traced::launch(
      cfg, c,
      {"fault_fork", "--mode", mode, "--rounds", "20", "--calls", "2000", "--child-calls", "20"},
      {"-F"});
  auto report = t.run().finish(after(3 * cfg.bound), o, after_text(cfg, "the command's start"));
  auto end = t.check_launched_end(cfg, o);
  if (report) {
    check_command_end(*report, o);
    bool own_copy = mode == "fork" || mode == "clone-sigchld";
    if (end) {
      std::uint64_t children = own_copy ? std::stoull((*end)["children"]) : 0;
      check_hits(*report, std::stoull((*end)["calls"]) + 20 * children, o);
    }
  }
  o.faults = 20;
  return o;
}

// Where a jump cannot go (a SIGSTOPped process cannot map a trampoline area; a rep site's
// function is too short), the jump cycles use the default int3 strategy instead.
Cycle int3_only(Cycle c) {
  if (c.strategy == "jump") c.strategy = "auto";
  return c;
}

// A process stopped by SIGSTOP when probecost attaches: it must still be stopped after
// detach, and run correctly after SIGCONT.
Outcome stopped_cycle(const Config& cfg, const Cycle& cycle, double d) {
  Cycle c = int3_only(cycle);
  Outcome o;
  auto target = start_target(cfg, {"fault_busy", "--threads", "2"});
  target->child.signal(SIGSTOP);
  if (!target->child.wait_stopped(after(cfg.bound))) throw std::runtime_error("no group-stop");
  TraceRun run(cfg, trace_args(c.strategy, {"-p", std::to_string(target->pid), "-b", kProbe,
                                            "--duration", fmt_seconds(d)}));
  run.finish(after(d + cfg.bound), o, after_text(cfg, "--duration " + fmt_seconds(d)));
  // A detached thread of a stopped group wakes and goes back into the group-stop before it
  // runs any code of its own: give it a moment to get there.
  if (!poll_until([&] { return all_threads_in_state(target->pid, 'T'); }, after(1))) {
    o.harm("no longer stopped after detach (thread states " + thread_states(target->pid) + ")");
  }
  check_text(target->pid, o, "after detach");
  target->child.signal(SIGCONT);
  stop_and_check(*target, cfg, o);
  return o;
}

// A site whose first instruction is rep movsb / rep stosb: one hit per call.
Outcome rep_cycle(const Config& cfg, const Cycle& cycle, const std::string& kind) {
  Cycle c = int3_only(cycle);
  Outcome o;
  auto t = Traced::launch(cfg, c, {"fault_rep", "--kind", kind, "--calls", "100", "--bytes", "64"},
                          {}, "rep_" + kind + "_site");
  auto report = t.run().finish(after(3 * cfg.bound), o, after_text(cfg, "the command's start"));
  auto end = t.check_launched_end(cfg, o);
  if (report) {
    check_command_end(*report, o);
    if (end) check_hits(*report, std::stoull((*end)["site_calls"]), o);
  }
  return o;
}

// Attached while idle; a known round of calls while traced, then SIGINT: exact counts.
Outcome attach_exact(const Config& cfg, const Cycle& c) {
  Outcome o;
  auto t = Traced::attach(cfg, c, {"fault_busy", "--idle", "--threads", "3"});
  if (!t.traced_or_lost(after(cfg.start_bound), o)) {
    t.check_attached(cfg, o);
    return o;
  }
  t.counted_round(cfg, 300, 900, o);
  return o;
}

// probecost killed by SIGKILL mid-trace. Busy target (even cycles): harmed today by design of
// int3 (a thread hits the byte with no tracer left). Idle target (odd cycles): the int3 bytes
// stay in the text; `probecost restore -p PID`, when it exists, must put the file's bytes back.
Outcome sigkill_cycle(const Config& cfg, const Cycle& c, bool idle) {
  Outcome o;
  std::vector<std::string> target = {"fault_busy", "--threads", "2"};
  if (idle) target.push_back("--idle");
  auto t = Traced::attach(cfg, c, target);
  if (!t.traced_or_lost(after(cfg.start_bound), o)) return o;
  if (idle) {
    t.pipes().send("go 50");
    t.pipes().wait_line("done", after(cfg.bound));
  } else {
    pause_for(c.uniform(0.005, 0.05));
  }
  t.run().kill();
  // A busy process that a trapped thread's SIGTRAP killed has nothing left to restore.
  bool alive = ::kill(t.pid(), 0) == 0 && proc_state(t.pid()) != 'Z';
  if (cfg.restore_available && alive) {
    Child restore({cfg.probecost, "restore", "-p", std::to_string(t.pid())}, SpawnFds{});
    auto status = restore.wait(after(cfg.bound));
    bool ok = status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0 &&
              text_differences(t.pid()).empty();
    // Killed meanwhile by the SIGTRAP of a thread that was stopped at a hit: nothing to judge.
    bool died = ::kill(t.pid(), 0) != 0 || proc_state(t.pid()) == 'Z';
    o.restore = ok     ? Outcome::Restore::Ok
                : died ? Outcome::Restore::NotRun
                       : Outcome::Restore::Failed;
    if (o.restore == Outcome::Restore::Failed)
      o.why += std::string(o.why.empty() ? "" : "; ") + "restore failed";
  }
  if (idle) {
    t.pipes().send("go 50");
    t.pipes().wait_line("done", after(cfg.bound));
  }
  t.check_attached(cfg, o);
  return o;
}

}  // namespace fault
