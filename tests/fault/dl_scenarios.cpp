// Issue 16 §2: libraries that come and go under a trace (fault_dl). A probe of a library not
// loaded yet goes in at its dlopen; a dlclose ends it with its hits; the same library again is
// probed again; another library at the same address is never written into. The target checks
// every result and its text; the hits must equal its calls into the probed library.
#include <signal.h>
#include <sys/wait.h>

#include "cycles.hpp"
#include "harness.hpp"

namespace fault {

namespace {

// Sends `cmd` and waits for the target's answer starting with `prefix`.
std::optional<std::string> ask(AttachedTarget& t, const Config& cfg, const std::string& cmd,
                               const std::string& prefix, Outcome& o) {
  t.send(cmd);
  auto line = t.wait_line(prefix, after(cfg.bound));
  if (!line) o.harm("no answer to '" + cmd + "'");
  return line;
}

std::uint64_t calls1(const std::optional<std::string>& closed) {
  auto at = closed ? closed->find("calls1=") : std::string::npos;
  return at == std::string::npos ? 0 : std::stoull(closed->substr(at + 7));
}

}  // namespace

Outcome dl_cycle(const Config& cfg, const Cycle& c, int variant) {
  Outcome o;
  o.faults = 0;
  auto target = start_target(cfg, {"fault_dl", "--lib1", cfg.bin_dir + "/libfault_dl_1.so",
                                   "--lib2", cfg.bin_dir + "/libfault_dl_2.so"});
  TraceRun run(cfg, trace_args(c.strategy, {"-p", std::to_string(target->pid), "-b",
                                            "libfault_dl_1.so:dl_probe"}));
  if (!run.wait_tracing(after(cfg.bound + 10))) {
    o.lose("probecost never started tracing: " + run.stderr_text());
    stop_and_check(*target, cfg, o);
    return o;
  }
  auto dl = [&](const std::string& cmd, const std::string& prefix) {
    ++o.faults;
    auto line = ask(*target, cfg, cmd, prefix, o);
    pause_for(c.uniform(0.001, 0.03));
    return line;
  };
  auto first = dl("open 1", "opened");
  std::optional<std::uint64_t> expected;
  if (variant == 3) {  // detached while the library is in, which then goes and another comes
    run.signal(SIGINT);
    run.finish(after(cfg.bound), o, "SIGINT");
    dl("close", "closed");
    dl("open 2", "opened");
  } else {
    expected = calls1(dl("close", "closed"));
    if (variant == 1) {
      dl("open 1", "opened");
      expected = calls1(dl("close", "closed"));
    } else if (variant == 2) {
      auto second = dl("open 2", "opened");
      if (first && second && *first != *second) o.why += "(library 2 elsewhere) ";
    }
    run.signal(SIGINT);
    auto report = run.finish(after(cfg.bound), o, "SIGINT");
    if (report) check_hits(*report, *expected, o);
  }
  stop_and_check(*target, cfg, o);
  return o;
}

// Both libraries probed with int3: the first dlopen'd and dlclose'd, the second dlopen'd at its
// address (its own probe goes in there), then probecost SIGKILLed while the threads call into
// it. The guardian holds a byte for that address from each library: only the second one's may
// go back (the mapping's file there is the second's), or the threads run the first library's
// byte in the second's code. Then `probecost restore`; the text must be the files'.
Outcome dl_sigkill_cycle(const Config& cfg, const Cycle& c) {
  Outcome o;
  auto target = start_target(cfg, {"fault_dl", "--lib1", cfg.bin_dir + "/libfault_dl_1.so",
                                   "--lib2", cfg.bin_dir + "/libfault_dl_2.so"});
  std::string strategy = c.strategy == "jump" ? "auto" : c.strategy;
  TraceRun run(
      cfg, trace_args(strategy, {"-p", std::to_string(target->pid), "-b",
                                 "libfault_dl_1.so:dl_probe", "-b", "libfault_dl_2.so:dl_probe"}));
  if (!run.wait_tracing(after(cfg.bound + 10))) {
    o.lose("probecost never started tracing: " + run.stderr_text());
    stop_and_check(*target, cfg, o);
    return o;
  }
  auto first = ask(*target, cfg, "open 1", "opened", o);
  pause_for(c.uniform(0.001, 0.03));
  ask(*target, cfg, "close", "closed", o);
  auto second = ask(*target, cfg, "open 2", "opened", o);
  if (first && second && *first != *second) o.why += "(library 2 elsewhere) ";
  pause_for(c.uniform(0.01, 0.05));
  run.kill();
  pause_for(0.2);  // the guardian's bytes go back; the threads call on
  Child restore({cfg.probecost, "restore", "-p", std::to_string(target->pid)}, SpawnFds{});
  auto status = restore.wait(after(cfg.bound));
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0)
    o.harm("probecost restore failed: " + (status ? describe_status(*status) : "hung"));
  check_text(target->pid, o, "after the guardian and restore");
  stop_and_check(*target, cfg, o);
  return o;
}

}  // namespace fault
