#pragma once
// One cycle of each kind of attack, with its variant chosen by the caller: the scenarios of
// the suite pick variants by cycle number, the regression tests of issue 7 pick the one that
// reproduces a failure.
#include <string>
#include <vector>

#include "scenario.hpp"

namespace fault {

// Attach (-p) to `target` for --duration `seconds`, then check it as it runs on untraced.
Outcome attach_for_duration(const Config& cfg, const Cycle& c, std::vector<std::string> target,
                            double seconds);
// A stop signal (two, with `second`) at a random moment once probecost catches them.
Outcome signal_cycle(const Config& cfg, const Cycle& c, bool launched, bool second);
// fault_exit: exit() from the main thread or a hitting thread (`from_thread`) while traced.
Outcome exit_cycle(const Config& cfg, const Cycle& c, bool launched, bool from_thread,
                   unsigned threads);
// The process exits while probecost is attaching.
Outcome exit_during_attach(const Config& cfg, const Cycle& c);
// fault_exec: exec from the main thread or a non-leader thread while traced.
Outcome exec_cycle(const Config& cfg, const Cycle& c, bool launched, bool from_thread);
// fault_fork --mode MODE: attached for a random --duration, or launched with exact counts.
Outcome children_cycle(const Config& cfg, const Cycle& c, const std::string& mode, bool launched);
// The same with -F (--follow-forks): every child traced as a process of its own. `target_args`
// go to fault_fork after its mode.
Outcome follow_cycle(const Config& cfg, const Cycle& c, const std::string& mode, bool launched,
                     const std::vector<std::string>& target_args = {});
// Attached while stopped by SIGSTOP, for --duration `seconds`.
Outcome stopped_cycle(const Config& cfg, const Cycle& c, double seconds);
// fault_rep --kind movsb|stosb, launched: hits must equal calls.
Outcome rep_cycle(const Config& cfg, const Cycle& c, const std::string& kind);
// Attached while idle, a known round of calls, SIGINT: hits must equal calls.
Outcome attach_exact(const Config& cfg, const Cycle& c);
// fault_dl: dlopen of the probed library after attach, dlclose; then (variant) nothing more (0),
// the same library again and closed (1), the other library at the same address (2), or the
// trace ends with the library in, which then goes and the other comes (3).
Outcome dl_cycle(const Config& cfg, const Cycle& c, int variant);
Outcome dl_sigkill_cycle(const Config& cfg, const Cycle& c);
// SIGKILL of probecost mid-trace, on a busy target or an idle one; then `probecost restore`.
Outcome sigkill_cycle(const Config& cfg, const Cycle& c, bool idle);
// fault_busy --seccomp CALL:ACTION, attached: a known round of calls, SIGINT.
Outcome seccomp_cycle(const Config& cfg, const Cycle& c, const std::string& filter);
// SIGKILL of probecost while 2 threads call the probe `rate` times a second; then restore.
Outcome sigkill_rate_cycle(const Config& cfg, const Cycle& c, int rate);
// fault_foreign (its own int3 hook, a kernel uprobe): SIGKILL of probecost, then restore.
Outcome foreign_cycle(const Config& cfg, const Cycle& c);
// fault_handler --kind segv|fpe|ill|bus: a handler that knows the faulting instruction by its
// address, the instruction probed (issue 15 item 4); launched with exact counts, or attached.
Outcome handler_cycle(const Config& cfg, const Cycle& c, const std::string& kind, bool launched);
// fault_handler --kind park: attached while a handler is parked over the probed range (item 3).
Outcome parked_cycle(const Config& cfg, const Cycle& c);
// fault_short (functions of 1 to 4 bytes) under `probecost record`: launched with exact counts
// (variant 0), attached for a known round (1), attached while called for a random --duration (2).
Outcome short_record_cycle(const Config& cfg, const Cycle& c, int variant);
// One fault_busy --idle process, `iterations` times a trace of probe_fn each way of `ways`
// (-p, "jump" or an int3 step-over strategy) and, `with_record`, a record, each to SIGINT: its
// resident memory and mapping count printed every 10, harmed unless they come back to where
// they were (issue 23, item 3).
Outcome memory_cycle(const Config& cfg, const Cycle& c, int iterations,
                     const std::vector<std::string>& ways = {"jump", "outline"},
                     bool with_record = true);
// fault_busy with `threads` threads calling probe_fn without pause, `iterations` times a
// trace (-p --via jump) and a record, each for --duration 0.2: its mappings the same and its
// resident memory within the bound after, no detach kept a mapping, its calls exact.
// With `stacks`, trace and record take stacks (--stacks): snapshots in every hit.
Outcome memory_busy_cycle(const Config& cfg, const Cycle& c, int threads, int iterations,
                          bool stacks = false);

// `probecost record -p` of fault_busy (2 threads, idle) made to die: by
// PROBECOST_DIE_AT_HIT=`plan` (attach+N; detach+N, after a SIGINT once it records), or by a
// SIGKILL `kill_at` seconds after the seize (after the SIGINT with `during_detach`). Then a
// round of calls, and the target checked as after any detach.
struct RecordDeath {
  std::string plan;
  double kill_at = -1;
  bool during_detach = false;
  bool stacks = false;             // record --stacks: each entry's snapshot too
  std::string probe = "probe_fn";  // kProbe (traced.hpp)
};
struct RecordDeathResult {
  Outcome outcome;
  bool attach_over = false;   // the plan's call came after the attach (nothing died)
  bool in_injection = false;  // it died inside an injected call (issue 23 item 8)
  bool ended_itself = false;  // probecost exited (a detach+N past the detach's calls)
  std::string stderr_text;
};
RecordDeathResult record_death(const Config& cfg, const RecordDeath& d);
Outcome record_sigkill_cycle(const Config& cfg, const Cycle& c, bool stacks = false);

}  // namespace fault
