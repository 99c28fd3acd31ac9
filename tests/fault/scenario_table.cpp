// The scenarios of the fault-injection suite by name: what each attacks, its cycles in the
// short and the long form, and the variant of its attack each cycle runs.
#include "cycles.hpp"

namespace fault {

// The int3 step-over strategies (with --via int3), and "jump" (--via jump: no int3 at all).
const std::vector<std::string> kStrategies = {"auto", "singlestep", "emulate", "outline", "jump"};

namespace {

// --duration of an attach/detach cycle: 0.05, 0.01, or random in [0.001, 0.2).
double cycle_duration(const Cycle& c) {
  switch (c.index % 3) {
    case 0:
      return 0.05;
    case 1:
      return 0.01;
    default:
      return c.uniform(0.001, 0.2);
  }
}

// The variants of each scenario, by cycle number.
Outcome busy_two(const Config& cfg, const Cycle& c) {
  return attach_for_duration(cfg, c, {"fault_busy", "--threads", "2"}, cycle_duration(c));
}
Outcome busy_churn(const Config& cfg, const Cycle& c) {
  return attach_for_duration(cfg, c, {"fault_busy", "--churn", "--seed", std::to_string(c.index)},
                             cycle_duration(c));
}
Outcome busy_many(const Config& cfg, const Cycle& c) {
  return attach_for_duration(cfg, c, {"fault_busy", "--threads", "32"}, cycle_duration(c));
}
Outcome signals(const Config& cfg, const Cycle& c) {
  return signal_cycle(cfg, c, c.index % 4 == 3, c.below(3) == 0);
}
Outcome exit_while_hit(const Config& cfg, const Cycle& c) {
  return exit_cycle(cfg, c, (c.index / 2) % 2 == 1, c.index % 2 == 1, 3);
}
Outcome exec_main(const Config& cfg, const Cycle& c) {
  return exec_cycle(cfg, c, c.index % 2 == 1, false);
}
Outcome exec_thread(const Config& cfg, const Cycle& c) {
  return exec_cycle(cfg, c, c.index % 2 == 1, true);
}
Outcome children_while_hit(const Config& cfg, const Cycle& c, const std::string& mode) {
  return children_cycle(cfg, c, mode, c.index % 2 == 1);
}
Outcome stopped(const Config& cfg, const Cycle& c) {
  return stopped_cycle(cfg, c, c.index % 2 ? 0.01 : 0.05);
}
Outcome rep_site(const Config& cfg, const Cycle& c, const std::string& kind) {
  return rep_cycle(cfg, c, kind);
}

}  // namespace

const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> all = {
      {"busy-2threads", "attach --duration 0.05/0.01/random, detach; 2 threads hammering", 60, 500,
       false, false, busy_two},
      {"busy-churn", "the same; threads created and ending all the time", 30, 300, false, false,
       busy_churn},
      {"busy-32threads", "the same; 32 threads hammering", 20, 300, false, false, busy_many},
      {"signals", "SIGINT/TERM/HUP at random moments, sometimes two", 60, 600, false, false,
       signals},
      {"exit", "exit() from main or a thread while others hit; -p and --", 16, 120, false, false,
       exit_while_hit},
      {"exit-attaching", "the process exits while probecost attaches", 16, 100, false, false,
       exit_during_attach},
      {"exec-main", "exec from the main thread while others hit; -p and --", 12, 100, false, false,
       exec_main},
      {"exec-thread", "exec from a non-leader thread while others hit; -p and --", 12, 100, false,
       false, exec_thread},
      {"fork", "fork loop while hit; -p, and -- with exact counts", 8, 60, true, false,
       [](const Config& cfg, const Cycle& c) { return children_while_hit(cfg, c, "fork"); }},
      {"vfork", "vfork loop (children call the probe) while hit", 8, 60, true, false,
       [](const Config& cfg, const Cycle& c) { return children_while_hit(cfg, c, "vfork"); }},
      {"spawn", "posix_spawn loop (CLONE_VM|CLONE_VFORK, exec) while hit", 8, 60, true, false,
       [](const Config& cfg, const Cycle& c) { return children_while_hit(cfg, c, "spawn"); }},
      {"clone-vm", "clone(CLONE_VM|SIGCHLD): a process sharing the memory", 8, 60, true, false,
       [](const Config& cfg, const Cycle& c) { return children_while_hit(cfg, c, "clone-vm"); }},
      {"clone-nosig", "clone(0): a fork-like child with no exit signal", 8, 60, true, false,
       [](const Config& cfg, const Cycle& c) { return children_while_hit(cfg, c, "clone-nosig"); }},
      {"clone-sigchld", "clone(SIGCHLD): a fork through clone()", 8, 60, true, false,
       [](const Config& cfg, const Cycle& c) {
         return children_while_hit(cfg, c, "clone-sigchld");
       }},
      {"follow-forks", "-F: fork, clone, vfork and spawn loops while hit, children traced", 8, 60,
       true, false,
       [](const Config& cfg, const Cycle& c) {
         static const char* modes[] = {"fork", "clone-sigchld", "vfork", "spawn"};
         return follow_cycle(cfg, c, modes[(c.index / 2) % 4], c.index % 2 == 1);
       }},
      {"stopped", "attached while stopped by SIGSTOP: stays stopped, runs after SIGCONT", 8, 60,
       false, false, stopped},
      {"rep-movsb", "first instruction rep movsb: hits equal calls", 8, 40, true, false,
       [](const Config& cfg, const Cycle& c) { return rep_site(cfg, c, "movsb"); }},
      {"rep-stosb", "first instruction rep stosb: hits equal calls", 8, 40, true, false,
       [](const Config& cfg, const Cycle& c) { return rep_site(cfg, c, "stosb"); }},
      {"attach-exact", "attach, a known round of calls, SIGINT: hits equal calls", 12, 100, true,
       false, attach_exact},
      {"sigkill-idle", "probecost killed by SIGKILL while idle; then probecost restore", 4, 20,
       false, false, [](const Config& cfg, const Cycle& c) { return sigkill_cycle(cfg, c, true); }},
      {"sigkill", "probecost SIGKILLed at 100, 500, 1000 hits/s; then probecost restore", 9, 60,
       false, false,
       [](const Config& cfg, const Cycle& c) {
         static const int rates[] = {100, 500, 1000};
         return sigkill_rate_cycle(cfg, c, rates[c.index % 3]);
       }},
      {"seccomp", "a seccomp filter kills, traps, EPERMs or ENOSYSes each injected call", 16, 64,
       true, false,
       [](const Config& cfg, const Cycle& c) {
         static const char* calls[] = {"memfd_create", "mmap-exec", "mmap-fixed", "rt_sigaction"};
         static const char* actions[] = {"kill", "trap", "eperm", "enosys"};
         return seccomp_cycle(cfg, c,
                              std::string(calls[c.index % 4]) + ":" + actions[(c.index / 4) % 4]);
       }},
      {"restore-foreign", "SIGKILL, then restore beside the program's own int3 and a uprobe", 5, 30,
       false, false, foreign_cycle},
      {"fault-handler", "SafeFetch-style handlers (SEGV, FPE, ILL, BUS) on a probed fault", 8, 80,
       true, false,
       [](const Config& cfg, const Cycle& c) {
         static const char* kinds[] = {"segv", "fpe", "ill", "bus"};
         return handler_cycle(cfg, c, kinds[(c.index / 2) % 4], c.index % 2 == 0);
       }},
      {"parked-handler", "attached while a handler is parked over the probed range", 5, 40, true,
       false, parked_cycle},
      {"dlopen", "dlopen, dlclose, reopen at the same address (same library, another) while hit", 8,
       60, true, false,
       [](const Config& cfg, const Cycle& c) { return dl_cycle(cfg, c, c.index % 4); }},
      {"dl-sigkill", "another library at a dlclose'd one's address, probed; probecost SIGKILLed", 4,
       30, false, false, dl_sigkill_cycle},
      {"short-record",
       "functions of 1 to 4 bytes recorded (record) launched and attached, idle and busy", 6, 45,
       true, false,
       [](const Config& cfg, const Cycle& c) { return short_record_cycle(cfg, c, c.index % 3); }},
      {"memory-cycles", "one process, 100 trace/record/detach: its memory and mappings flat", 0, 1,
       false, false, [](const Config& cfg, const Cycle& c) { return memory_cycle(cfg, c, 100); }},
      {"memory-busy", "a busy process (1, 3 threads), 25 trace/record --duration: flat, exact", 0,
       2, false, false,
       [](const Config& cfg, const Cycle& c) {
         return memory_busy_cycle(cfg, c, c.index % 2 ? 3 : 1, 25);
       }},
      {"record-sigkill", "record -p SIGKILLed at every stage of its attach and detach", 6, 60,
       false, false,
       [](const Config& cfg, const Cycle& c) { return record_sigkill_cycle(cfg, c); }},
      {"record-stacks-sigkill", "the same with --stacks (a second buffer, snapshots)", 3, 30, false,
       false, [](const Config& cfg, const Cycle& c) { return record_sigkill_cycle(cfg, c, true); }},
      {"memory-busy-stacks", "memory-busy with --stacks: snapshots at every hit", 0, 2, false,
       false,
       [](const Config& cfg, const Cycle& c) {
         return memory_busy_cycle(cfg, c, c.index % 2 ? 3 : 1, 25, true);
       }},
  };
  return all;
}

const Scenario* find_scenario(const std::string& name) {
  for (const auto& s : scenarios()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace fault
