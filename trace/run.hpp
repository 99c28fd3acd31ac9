#pragma once
// Inside `probecost trace`: the run over every traced process (TraceRun), what it keeps per
// process (Traced) and per hit (Recorder). Private to trace/.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "breakpoint/step_over.hpp"
#include "trace/trace.hpp"
#include "tracer/family.hpp"
#include "tracer/jump_probes.hpp"
#include "tracer/process.hpp"
#include "tracer/session.hpp"
#include "tracer/stacks.hpp"
#include "tracer/symbols.hpp"

namespace probecost::trace_run {

double now_s();
// A thread's name (/proc/PID/task/TID/comm), read once, at its first hit.
std::string thread_name(pid_t pid, pid_t tid);

// Hit bookkeeping that outlives the threads (a thread's state goes when it exits).
struct Recorder {
  std::map<std::uint64_t, std::map<pid_t, std::uint64_t>> threads_by_site;
  std::map<pid_t, std::uint64_t> thread_hits;
  std::map<pid_t, std::string> thread_names;
  std::map<pid_t, pid_t> sharer_of;  // threads of other processes sharing the memory: their pid
  std::map<std::uint64_t, std::map<std::vector<std::uint64_t>, std::uint64_t>> stacks;
  std::unordered_map<std::uint64_t, std::string> frame_names;
  std::optional<StackCollector> collector;
  double stack_seconds = 0;

  void record_stack(ProcessSymbols& symbols, pid_t tid, StoppedThread& thread,
                    BreakpointSite& site);
  std::vector<StackCount> top_stacks(std::uint64_t site) const;
  void forget_image() {
    thread_hits.clear();
    thread_names.clear();
    threads_by_site.clear();
    stacks.clear();
    frame_names.clear();
  }
};

// How one probe is in: an int3 site, or a jump probe (its index in JumpProbes).
struct Placement {
  std::optional<std::size_t> jump;
  std::string why_not_jump;
};

// One process of the trace (the one started or attached to, or one it forked while we follow
// forks), and its current image's probes.
struct Traced {
  TracedProcess* proc = nullptr;
  std::unique_ptr<ProcessSymbols> symbols;
  std::vector<ResolvedProbe> probes;
  std::vector<Placement> placements;
  std::unique_ptr<StepOver> step_over;
  std::unique_ptr<JumpProbes> jumps;
  std::unique_ptr<Session> session;
  Recorder rec;
  std::vector<std::string> images;
  double cpu0 = 0, cpu_last = 0;  // its CPU time when we took it, and when last looked at
};

// One run of `probecost trace`: its processes, an image at a time each (a new one after each
// exec).
class TraceRun {
 public:
  TraceRun(const TraceOptions& opts, std::ostream& notes)
      : opts_(opts), notes_(notes), family_(start_target(opts)), held_from_(now_s()) {}
  // Attaches to opts.pid, or launches opts.command and runs it to its entry point.
  static std::unique_ptr<TracedProcess> start_target(const TraceOptions& opts);
  TraceReport run();

 private:
  TracedProcess& root() { return family_.root(); }
  Traced& add_traced(TracedProcess& proc);
  Traced* traced(const TracedProcess* proc);
  void install_image(Traced& tr);
  void refuse_leftovers(Traced& tr);
  std::vector<ResolvedProbe> resolve(Traced& tr, bool first_image);
  void enable_int3(Traced& tr, const ResolvedProbe& probe);
  std::vector<Placement> place_jumps(Traced& tr);
  ScratchMapper scratch_mapper(TracedProcess& p);
  void start_session(Traced& tr);
  void take_fork_child(Traced& tr, Traced& parent);
  void take_new_processes();
  bool follow_execs();
  void follow_exec(Traced& tr);
  void on_tick();
  Session::End loop();
  void close_image(Traced& tr);
  void split_sharers(Traced& tr, ProbeReport& pr);
  void let_go();
  std::vector<pid_t> leftovers() const;
  std::uint64_t jump_hits(const Traced& tr) const;
  std::uint64_t hits_so_far() const;

  const TraceOptions& opts_;
  std::ostream& notes_;
  Family family_;
  std::vector<std::unique_ptr<Traced>> traced_;  // the root first
  TraceReport report_;
  std::set<std::string> probed_specs_;
  std::map<pid_t, pid_t> sharers_;  // a process that shared a traced one's memory -> that one  //
                                    // specs that named something in some image
  double t0_ = 0, next_progress_ = 0;
  double held_from_;  // every thread is stopped from here until the session runs
};

}  // namespace probecost::trace_run
