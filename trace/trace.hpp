#pragma once
// `probecost trace`: int3 probes in a process that runs already (by PID) or that we start,
// an empty handler that counts every hit, optional stacks, and a clean exit on every path.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "breakpoint/int3/step_over.hpp"
#include "common/phases.hpp"
#include "trace/via.hpp"
#include "tracer/symbols/probes.hpp"
#include "tracer/symbols/usdt.hpp"

namespace probecost {

namespace record {
class Recorder;
struct ProbeInfo;
}  // namespace record
namespace trace_run {
struct LiveCounts;
}  // namespace trace_run

// `probecost record`: call probes (each function's entry and every way out) instead of
// counting ones, their events handed to a recording while the process runs.
struct CallRecording {
  int args = 0;  // arguments per entry event, 0 to 6
  // Each CPU's ring in the process, in bytes (a power of two); 0: CallOptions' default.
  std::uint64_t buffer_bytes = 0;
  // A writer that finds its ring full waits for the drain (at most wait_bound_ns), or with
  // `drop` drops the record at once (counted lost).
  bool drop = false;
  long wait_bound_ns = 1'000'000'000;
  std::string spool_dir = ".";  // where the raw records wait until the trace is written
  // --stacks: each jump-patched entry also copies this many bytes of its stack (0: no stacks),
  // unwound to at most stack_depth frames by a thread of probecost's while the process runs.
  std::uint32_t stack_bytes = 0;
  unsigned stack_depth = 16;
  double tsc_hz = 0;                      // TSC ticks per second (the drain's flush interval)
  trace_run::LiveCounts* live = nullptr;  // what the drains kept so far (a status line's)
  // Called once the process is let go, before the trace is written from the spool.
  std::function<void()> on_let_go;
  // Called once, when the first image's probes are resolved and before any event, with one
  // ProbeInfo per function probed: the recording their events go to.
  std::function<record::Recorder&(const std::vector<record::ProbeInfo>&)> start;
};

struct TraceOptions {
  pid_t pid = 0;                     // attach to this process (and to more_pids), or
  std::vector<pid_t> more_pids;      // the second and later -p
  std::vector<std::string> command;  // launch this one
  std::vector<std::string> probes;
  bool all_matches = false;
  bool stacks = false;
  unsigned stack_depth = 16;
  // With --stacks, jump probes copy this many bytes of the stack at each hit (0: int3 probes
  // and ptrace unwinding only, as before issue 26).
  std::uint32_t stack_size = 8192;
  // USDT probes: read each hit's arguments (tracer/symbols/usdt_args.hpp) and count the
  // distinct argument lists; every probe is then an int3 (a jump never stops the thread).
  bool usdt_args = false;
  double duration_s = 0;  // 0: until the process ends or a signal
  bool kill_on_exit = false;
  StepOverChoice step_over = StepOverChoice::Auto;
  Via via = Via::Auto;
  bool events = false;  // jump probes write a record per hit, drained while it runs
  const CallRecording* calls = nullptr;  // record calls (`probecost record`): see above
  bool follow_exec = true;               // after an exec, probe the new image (else the trace ends)
  bool follow_forks = false;             // probe the children of fork, vfork and clone too
  bool progress = false;                 // one line per second on stderr
  bool announce = true;                  // "tracing ..." on stderr once the probes are in
  std::string tool = "probecost trace";  // what the notes on stderr begin with
  // A launched command's standard streams (dup2'd onto 0, 1, 2 when >= 0) and the CPU it is
  // pinned to (when >= 0), as in LaunchSpec. `probecost overhead` runs commands this way.
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;
  int cpu = -1;
  // Called at every tick of the event loop (100 ms) while the process lives, with its PID.
  std::function<void(pid_t)> on_tick;
};

struct StackCount {
  std::vector<std::string> frames;  // innermost first, "symbol+0x12 in module"
  std::uint64_t count = 0;
};

struct ProbeReport {
  pid_t pid = 0;  // the process it was in
  ResolvedProbe probe;
  std::string image;                 // the executable the process ran when this probe was in
  Via via = Via::Int3;               // Int3 or Jump
  std::string why_not_jump;          // with --via auto, for an int3 probe
  std::string step_over;             // how a hit gets past it (int3), or how much the jump replaced
  std::optional<StepMethod> method;  // int3: how a hit gets past it
  std::uint64_t events_read = 0, events_lost = 0;  // jump probes with --events
  std::uint64_t hits = 0;
  std::map<pid_t, std::uint64_t> threads;  // int3 probes: hits by thread
  std::vector<StackCount> stacks;          // most frequent first
  // --usdt-args: each distinct argument list ("\"/tmp/w.py\", \"f\", 2") and its hits, most
  // frequent first.
  std::vector<std::pair<std::string, std::uint64_t>> usdt_args;
  // Its library came and went (dlclose, dlopen again): how many times it was probed (hits of
  // every load added), and whether it was unloaded at the end (hits until the dlclose).
  unsigned loads = 1;
  bool unloaded = false;
};

// One process of the trace: the one started or attached to, and with --follow-forks every
// process it forked that we followed.
struct ProcessReport {
  pid_t pid = 0;
  pid_t parent = 0;                 // the traced process that made it (0: the first)
  std::vector<std::string> images;  // executables it ran while traced, in order
  std::uint64_t hits = 0;
  std::string end;  // how it ended, or "let go"
};

struct TraceReport {
  pid_t pid = 0;
  bool launched = false;
  double duration_s = 0;
  std::vector<ProbeReport> probes;
  std::map<pid_t, std::uint64_t> thread_hits;
  std::map<pid_t, std::string> thread_names;  // each thread's name (comm) at its first hit
  std::uint64_t hits = 0;
  // How long the process was held stopped while the probes went in (symbols resolved, bytes
  // written): before `duration_s` starts (for a launched command, from its entry point on),
  // and after each exec the trace followed, within `duration_s`.
  double held_s = 0;
  // When the probes were in and the process ran again (CLOCK_MONOTONIC, now_s()): duration_s
  // counts from here.
  double start_s = 0;
  // Where held_s went, phase by phase (wall and probecost's CPU; each process's and each
  // image's together): stopping the threads, resolving the probes, checking the threads,
  // mapping the trampolines' area, writing the bytes, resuming.
  std::vector<Phase> held_phases;
  // What the first image's probes needed while the process was held: its symbols read before
  // the stop (true when they were, and still held), and the modules' files read and decoded
  // while held (0 when they were read before).
  bool symbols_before_stop = false;
  bool probes_before_stop = false;  // and the probes resolved before it
  std::uint64_t modules_read_held = 0;
  std::uint64_t int3_hits = 0, jump_hits = 0;  // `hits` by how the probe was in
  double tracer_cpu_s = 0;                     // probecost's CPU while the probes were in
  bool spool_error = false;  // `record`: records could not be kept (said on stderr)
  double events_cpu_s = 0;   // the part of it spent reading jump probes' records (--events)
  double tracee_cpu_s = 0;   // the process's CPU meanwhile: its own work and its side of each hit
  // The tracer's side of a hit alone, each kind its own: an int3 hit stops the thread (the
  // tracer's CPU but the records' reading, over int3 hits); a jump hit is counted in the
  // tracee, and costs the tracer only the reading of its record (--events; else 0).
  double tracer_cpu_ns_per_int3_hit = 0, tracer_cpu_ns_per_jump_hit = 0;
  // (tracer + tracee CPU) / hits: both sides of a hit, and the tracee's own work between hits
  // too. Only an untraced run tells the two apart (`probecost overhead` does).
  double cpu_ns_per_hit = 0;
  // --stacks on jump probes: their snapshots, and the reader's CPU unwinding them.
  std::uint64_t snapshots = 0, snapshots_unwound = 0, snapshots_truncated = 0, snapshots_lost = 0;
  std::map<std::string, std::uint64_t> snapshots_not_copied;  // by why
  double snapshot_unwind_s = 0;
  // Complete stacks by the bytes of stack they needed, in 256-byte steps (needed_summary).
  std::vector<std::uint64_t> snapshots_needed;
  double stack_ns_per_hit = 0;  // part of the tracer's spent unwinding, per int3 hit (--stacks)
  // `record --stacks`: entries by what they got ("with_stack", "truncated" among them, and each
  // reason for none, as record::stack_missing_text says it).
  std::map<std::string, std::uint64_t> entry_stacks;
  double syscalls_per_int3_hit = 0;  // the tracer's system calls (a jump hit makes none)
  bool stacks = false;
  bool usdt_args = false;
  std::string ending;                 // why the trace ended
  std::string command_end;            // a launched command: how it ended
  std::optional<int> command_status;  // and its raw wait status, when it ended
  std::vector<std::string> images;    // executables traced, in order (more than one: exec)
  bool follow_forks = false;
  std::vector<ProcessReport> processes;   // the first is the one started or attached to
  std::vector<std::string> never_probed;  // probes that named nothing in any image traced
};

TraceReport run_trace(const TraceOptions& opts, std::ostream& notes);

// `probecost trace --list PATTERN`: the target's function symbols matching the glob.
std::vector<Symbol> list_target_symbols(const TraceOptions& opts, const std::string& pattern);
// The USDT probes of the target whose name matches `pattern` ("usdt:GLOB", as bpftrace -l).
std::vector<UsdtProbe> list_target_usdt(const TraceOptions& opts, const std::string& pattern);

// The bytes of stack the complete stacks needed (TraceReport::snapshots_needed): "median",
// "p90", "p99", "max", and "within_4096", "within_8192", "within_16384" (how many fit).
inline constexpr std::size_t kNeededBuckets = 257;
std::map<std::string, std::uint64_t> needed_summary(const std::vector<std::uint64_t>& buckets);

}  // namespace probecost
