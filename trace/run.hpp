#pragma once
// Inside `probecost trace`: the run over every traced process (TraceRun, which makes the
// TraceReport), what it keeps per process (ProcessTrace, which makes its ProcessReport and
// ProbeReports) and per hit (HitBook). Private to trace/.
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "breakpoint/int3/step_over.hpp"
#include "common/clock.hpp"
#include "record/events.hpp"
#include "trace/call_feed.hpp"
#include "trace/stack_feed.hpp"
#include "trace/trace.hpp"
#include "tracer/core/event_loop.hpp"
#include "tracer/core/family.hpp"
#include "tracer/core/process.hpp"
#include "tracer/core/session.hpp"
#include "tracer/core/stacks.hpp"
#include "tracer/jump/jump_probes.hpp"
#include "tracer/symbols/link_map.hpp"
#include "tracer/symbols/symbols.hpp"
#include "tracer/symbols/usdt_args.hpp"

namespace probecost::trace_run {

// A thread's name (/proc/PID/task/TID/comm), read once, at its first hit.
std::string thread_name(pid_t pid, pid_t tid);

// Hit bookkeeping that outlives the threads (a thread's state goes when it exits).
struct HitBook {
  std::map<std::uint64_t, std::map<pid_t, std::uint64_t>> threads_by_site;
  std::map<pid_t, std::uint64_t> thread_hits;
  std::map<pid_t, std::string> thread_names;
  std::map<pid_t, pid_t> sharer_of;  // threads of other processes sharing the memory: their pid
  std::map<std::uint64_t, std::map<std::vector<std::uint64_t>, std::uint64_t>> stacks;
  std::unordered_map<std::uint64_t, std::string> frame_names;
  std::optional<StackCollector> collector;
  double stack_seconds = 0;
  // int3 hits' stacks from a copy of the stack (hit_book_stacks.cpp): its unwinder, the bytes
  // copied, the frames; the hits that needed libunwind over ptrace, and with
  // PROBECOST_STACKS_CHECK=1 those unwound both ways and those whose two stacks differed.
  std::unique_ptr<SnapshotUnwinder> unwinder;
  std::uint32_t snapshot_bytes = jump::kMaxStackBytes;
  unsigned stack_depth = 16;
  std::vector<std::uint8_t> stack_copy;
  std::set<std::uint64_t> no_module;  // pages of code the unwinder read the maps again for
  std::uint64_t ptrace_unwinds = 0, checked = 0, differed = 0;
  // --usdt-args: per site, its parsed argument specs and the hits of each argument list.
  std::map<std::uint64_t, std::vector<UsdtArg>> usdt_specs;
  std::map<std::uint64_t, std::map<std::string, std::uint64_t>> usdt_args;

  void record_stack(ProcessSymbols& symbols, pid_t pid, pid_t tid, StoppedThread& thread,
                    BreakpointSite& site);
  std::vector<std::uint64_t> snapshot_stack(pid_t pid, pid_t tid, const user_regs_struct& r,
                                            std::uint64_t site);
  // Names each frame of `ips` (the site first, then return addresses) into frame_names, once.
  void name_frames(ProcessSymbols& symbols, const std::vector<std::uint64_t>& ips);
  // Frame i of `ips` as named (name_frames), or its address when it was not.
  std::string frame_name(const std::vector<std::uint64_t>& ips, std::size_t i) const;
  // A stack unwound from a jump probe's snapshot, counted as record_stack counts its own.
  void add_stack(ProcessSymbols& symbols, std::uint64_t site, const std::vector<std::uint64_t>& ips,
                 std::uint64_t n = 1);
  std::vector<StackCount> top_stacks(std::uint64_t site) const;
  void forget_image() {
    thread_hits.clear();
    thread_names.clear();
    threads_by_site.clear();
    stacks.clear();
    frame_names.clear();
    usdt_args.clear();
  }
};

// How one probe is in: an int3 site, or a jump probe (its index in JumpProbes).
struct ProbeInstall {
  std::optional<std::size_t> jump;
  std::string why_not_jump;
};

// The trace of one process (the one started or attached to, or one it forked while we follow
// forks): the TracedProcess, its current image's probes and how each is in, and its counts.
struct ProcessTrace {
  TracedProcess* proc = nullptr;
  std::unique_ptr<ProcessSymbols> symbols;
  std::vector<ResolvedProbe> probes;
  std::vector<ProbeInstall> installs;
  std::unique_ptr<StepOver> step_over;
  std::unique_ptr<JumpProbes> jumps;
  std::unique_ptr<Session> session;
  std::unique_ptr<CallFeed> feed;         // `probecost record`: its image's call events
  std::unique_ptr<StackFeed> stack_feed;  // `trace --stacks`: its jump probes' snapshots
  HitBook book;
  std::vector<std::string> images;
  double cpu0 = 0, cpu_last = 0;  // its CPU time when we took it, and when last looked at
  // Probes whose module is not loaded (yet): they go in when the dynamic linker, watched at its
  // r_brk (link_map), says a dlopen mapped it.
  std::vector<std::string> pending;
  std::optional<LinkMapWatch> link_map;
};

// What can be read of a process before it is stopped (prepare.cpp): its symbols, and the
// modules' code and branch index that jump plans need. The stop then only checks and writes.
struct Prepared {
  std::unique_ptr<ProcessSymbols> symbols;
  std::string code_maps;  // its executable file mappings, as /proc/PID/maps gave them
  // The probes that can go in now, resolved from `symbols` and the process's memory as
  // resolve() would: nothing when they could not all be (an IFUNC that only a call of its
  // resolver tells, a bad probe: said at the stop), or when one names a bare address.
  std::optional<std::vector<ResolvedProbe>> probes;
};
// Nothing when the process cannot be read.
std::unique_ptr<Prepared> prepare(const TraceOptions& opts, pid_t pid);
// Every -p process's (none for a launched command: it has not run yet).
std::map<pid_t, std::unique_ptr<Prepared>> prepare_all(const TraceOptions& opts);
// The executable file mappings among `maps` (what ProcessSymbols saw, if they are unchanged).
std::string code_maps(const std::vector<Mapping>& maps);
// A probe of a library the process has not loaded, that could be loaded later: it waits.
bool waits_for_library(const ProbeSpec& spec, const ProcessSymbols& symbols);

// One run of `probecost trace`: its processes, an image at a time each (a new one after each
// exec).
class TraceRun {
 public:
  TraceRun(const TraceOptions& opts, std::ostream& notes)
      : opts_(opts), notes_(notes), prepared_(prepare_all(opts)), family_(start_target(opts)) {}
  // Attaches to opts.pid, or launches opts.command and runs it to its entry point.
  static std::unique_ptr<Family> start_target(const TraceOptions& opts);
  TraceReport run();

 private:
  TraceReport run_to_end();
  TracedProcess& root() { return family_->root(); }
  ProcessTrace& begin();
  void announce_stacks(ProcessTrace& tr);
  ProcessTrace& add_process(TracedProcess& proc);
  ProcessTrace* find_process(const TracedProcess* proc);
  void install_image(ProcessTrace& tr);
  void refuse_leftovers(ProcessTrace& tr);
  std::vector<ResolvedProbe> resolve(ProcessTrace& tr, bool first_image,
                                     std::optional<std::vector<ResolvedProbe>> ready);
  void enable_int3(ProcessTrace& tr, const ResolvedProbe& probe);
  std::vector<ProbeInstall> place_jumps(ProcessTrace& tr, std::size_t from);
  void place_probes(ProcessTrace& tr, std::size_t from);
  // run_pending.cpp: probes of libraries that come and go.
  std::vector<std::string> split_pending(ProcessTrace& tr, std::vector<std::string> specs);
  void watch_link_map(ProcessTrace& tr);
  void hook_link_map(ProcessTrace& tr);
  void on_link_map(ProcessTrace& tr, Task& task);
  void retire(ProcessTrace& tr, const std::vector<LeftAlone>& gone);
  void install_pending(ProcessTrace& tr, Task& task);
  ProbeReport probe_row(ProcessTrace& tr, std::size_t i, const std::string& image);
  void merge_loads();
  // run_calls.cpp: `probecost record`'s call probes.
  std::vector<ProbeInstall> place_calls(ProcessTrace& tr);
  void place_markers(ProcessTrace& tr, const std::vector<std::uint32_t>& probe_of,
                     std::vector<ProbeInstall>& out);
  std::vector<std::uint32_t> recording_probes(const ProcessTrace& tr);
  void drain_calls(ProcessTrace& tr, bool final);
  void replay_calls();
  ScratchMapper scratch_mapper(TracedProcess& p);
  void start_session(ProcessTrace& tr);
  void start_stack_feed(ProcessTrace& tr);
  void finish_stack_feed(ProcessTrace& tr);
  void name_entry_stacks(ProcessTrace& tr, EntryStacks& entries);
  void let_run(ProcessTrace& tr);
  void attach_others();
  void take_fork_child(ProcessTrace& tr, ProcessTrace& parent);
  void take_new_processes();
  bool follow_execs();
  void follow_exec(ProcessTrace& tr);
  void on_tick();
  Session* session_of(TracedProcess& proc);
  std::optional<RunEnd> between_events();
  RunEnd loop();
  void close_image(ProcessTrace& tr);
  void split_sharers(ProcessTrace& tr, ProbeReport& pr);
  void report_processes();
  void report_figures(std::uint64_t syscalls);
  void let_go();
  void let_go_after_failure();
  std::vector<pid_t> leftovers() const;
  std::uint64_t jump_hits(const ProcessTrace& tr) const;
  std::uint64_t hits_so_far() const;
  long stack_us_per_hit() const;
  std::string progress_text(double t) const;

  const TraceOptions& opts_;
  std::ostream& notes_;
  // Each -p process's Prepared, read before the stop; used at its first image if its code
  // mappings are still those it was read from, dropped either way.
  std::map<pid_t, std::unique_ptr<Prepared>> prepared_;
  std::unique_ptr<Family> family_;
  std::vector<std::unique_ptr<ProcessTrace>> processes_;  // the root first
  TraceReport report_;
  std::set<std::string> probed_specs_;  // specs that named something in some image
  std::map<pid_t, pid_t> sharers_;      // a process that shared a traced one's memory -> that one
  double t0_ = 0;
  std::atomic<std::uint64_t> live_hits_{0};  // for the status line's thread
  std::atomic<long> live_stack_us_{0};
  bool ran_ = false;  // the root was let run: a failure lets it go (let_go_after_failure)
  record::Recorder* recording_ = nullptr;  // `probecost record`: made at the first image
  std::vector<record::ProbeInfo> recorded_;
  std::vector<std::unique_ptr<CallFeed>> fed_;  // images whose call buffers are final
  std::uint32_t stack_ids_ = 1;                 // `record --stacks`: the next stack's id
  std::uint64_t drained_records_ = 0, drained_bytes_ = 0;
  double drain_cpu_s_ = 0;
  std::string spool_io_;  // how the drain wrote its spool (SpoolWriter::how)
  std::vector<std::string> spool_errors_;
};

}  // namespace probecost::trace_run
