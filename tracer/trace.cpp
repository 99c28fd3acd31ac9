#include "tracer/trace.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <optional>
#include <unordered_map>

#include "breakpoint/error.hpp"
#include "tracer/jump_probes.hpp"
#include "tracer/process.hpp"
#include "tracer/session.hpp"
#include "tracer/stacks.hpp"
#include "tracer/syscalls.hpp"

namespace probecost {

namespace {

double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// A thread's name (/proc/PID/task/TID/comm: pthread_setname_np, or the program's name), read
// once, at its first hit.
std::string thread_name(pid_t pid, pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

std::unique_ptr<TracedProcess> start_target(const TraceOptions& opts) {
  if (opts.pid) return TracedProcess::attach(opts.pid);
  LaunchSpec spec;
  spec.argv = opts.command;
  spec.stdin_fd = opts.stdin_fd;
  spec.stdout_fd = opts.stdout_fd;
  spec.stderr_fd = opts.stderr_fd;
  spec.cpu = opts.cpu;
  auto proc = TracedProcess::launch(spec);
  // Stopped at its exec, only the executable and the dynamic loader are mapped: run to the
  // entry point so that the libraries it needs at start-up are there to be probed.
  proc->run_to_entry();
  return proc;
}

// Hit bookkeeping that outlives the threads (a thread's state goes when it exits).
struct Recorder {
  std::map<std::uint64_t, std::map<pid_t, std::uint64_t>> threads_by_site;
  std::map<pid_t, std::uint64_t> thread_hits;
  std::map<pid_t, std::string> thread_names;
  std::map<std::uint64_t, std::map<std::vector<std::uint64_t>, std::uint64_t>> stacks;
  std::unordered_map<std::uint64_t, std::string> frame_names;
  std::optional<StackCollector> collector;
  double stack_seconds = 0;

  void record_stack(ProcessSymbols& symbols, pid_t tid, StoppedThread& thread,
                    BreakpointSite& site);
  std::vector<StackCount> top_stacks(std::uint64_t site) const;
  void forget_image() {
    threads_by_site.clear();
    stacks.clear();
    frame_names.clear();
  }
};

void Recorder::record_stack(ProcessSymbols& symbols, pid_t tid, StoppedThread& thread,
                            BreakpointSite& site) {
  double t0 = now_s();
  // Unwind from the site itself, not from one past the int3: the unwind tables describe the
  // site's first instruction as not yet executed.
  thread.set_pc(site.address());
  auto ips = collector->capture(tid);
  for (std::size_t i = 0; i < ips.size(); ++i) {
    // Return addresses point after the call: look up ip-1 for the caller's line (frame 0 is
    // the site itself).
    std::uint64_t ip = i == 0 ? ips[i] : ips[i] - 1;
    if (frame_names.count(ip)) continue;
    std::string name = symbols.describe(RuntimeAddr(ip));
    if (name.rfind("0x", 0) == 0) {  // unknown: a library loaded since? look again once
      symbols.refresh();
      name = symbols.describe(RuntimeAddr(ip));
    }
    frame_names[ip] = name;
  }
  ++stacks[site.address().value()][ips];
  stack_seconds += now_s() - t0;
}

std::vector<StackCount> Recorder::top_stacks(std::uint64_t site) const {
  std::vector<StackCount> out;
  auto it = stacks.find(site);
  if (it == stacks.end()) return out;
  for (const auto& [ips, count] : it->second) {
    StackCount sc;
    sc.count = count;
    for (std::size_t i = 0; i < ips.size(); ++i) {
      sc.frames.push_back(frame_names.at(i == 0 ? ips[i] : ips[i] - 1));
    }
    out.push_back(sc);
  }
  std::sort(out.begin(), out.end(),
            [](const StackCount& a, const StackCount& b) { return a.count > b.count; });
  return out;
}

std::string describe_end(Session::End end, const TracedProcess& proc) {
  switch (end) {
    case Session::End::ProcessEnded:
      return "the process " + (proc.end() ? proc.end()->describe() : std::string("ended"));
    case Session::End::Exec:
      return "the process called exec";
    case Session::End::Interrupted:
      return "probecost was interrupted";
    case Session::End::Tick:
    case Session::End::Deadline:
      return "--duration reached";
    case Session::End::Predicate:
      break;
  }
  return "stopped";
}

// After we let go of a launched command: by default it runs to its end, untraced, and we wait
// for it, as a wrapper does (its status becomes ours). Stop signals that reach us meanwhile
// are not the command's: only a second one (a user insisting) makes us stop waiting, and the
// command runs on by itself.
std::optional<int> wait_for_command(pid_t pid) {
  int status = 0;
  int seen = stop_signals_seen();
  for (;;) {
    pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (stop_signals_seen() > seen && force_requested()) return std::nullopt;
  }
}

// How one probe is in: an int3 site, or a jump probe (its index in JumpProbes).
struct Placement {
  std::optional<std::size_t> jump;
  std::string why_not_jump;
};

// One run of `probecost trace`: an image at a time (a new one after each exec).
class TraceRun {
 public:
  TraceRun(const TraceOptions& opts, std::ostream& notes)
      : opts_(opts), notes_(notes), proc_(start_target(opts)), held_from_(now_s()) {}
  TraceReport run();

 private:
  void install_image();
  void refuse_leftovers();
  std::vector<ResolvedProbe> resolve(bool first_image);
  void enable_int3(const ResolvedProbe& probe);
  Placement place(const ResolvedProbe& probe, std::map<std::uint64_t, std::size_t>& jump_at);
  Session::End run_session(Session& session);
  void close_image();
  void let_go();
  std::uint64_t jump_hits() const;

  const TraceOptions& opts_;
  std::ostream& notes_;
  std::unique_ptr<TracedProcess> proc_;
  TraceReport report_;
  // The current image's
  std::unique_ptr<ProcessSymbols> symbols_;
  std::vector<ResolvedProbe> probes_;
  std::vector<Placement> placements_;
  std::unique_ptr<StepOver> step_over_;
  std::unique_ptr<JumpProbes> jumps_;
  Recorder rec_;
  std::uint64_t int3_hits_before_ = 0;  // session hits of earlier images
  double t0_ = 0, tracee0_ = 0, tracee_last_ = 0, next_progress_ = 0;
  double held_from_;  // every thread is stopped from here until the session runs
};

std::vector<ResolvedProbe> TraceRun::resolve(bool first_image) {
  TracedProcess& p = *proc_;
  // An IFUNC that no relocated slot shows resolved: its resolver runs in a stopped thread.
  ResolverCall call = [&p](RuntimeAddr resolver) { return p.call_in_tracee(resolver); };
  std::vector<ResolvedProbe> out;
  if (first_image) {
    out =
        resolve_probes(opts_.probes, *symbols_, p.memory(), p.proc_tid(), opts_.all_matches, call);
  } else {
    // In a new image a probe may name nothing: say so and go on with the others.
    for (const auto& spec : opts_.probes) {
      try {
        auto r =
            resolve_probes({spec}, *symbols_, p.memory(), p.proc_tid(), opts_.all_matches, call);
        out.insert(out.end(), r.begin(), r.end());
      } catch (const UsageError& e) {
        notes_ << "probecost trace: not probed in the new image: " << e.what() << std::endl;
      }
    }
  }
  merge_same_address(out);
  return out;
}

void TraceRun::enable_int3(const ResolvedProbe& probe) {
  TracedProcess& p = *proc_;
  BreakpointSite& site = p.sites().add(probe.address, probe.spec);
  if (site.enabled()) return;  // two specs naming one address
  try {
    site.enable();
  } catch (const SiteOccupied&) {
    throw Error("cannot probe " + probe.spec + " (" + probe.symbol + " at " + probe.address.hex() +
                ") in process " + std::to_string(p.pid()) +
                ": it holds an int3 already. If a probecost was killed while tracing it, "
                "'probecost restore -p " +
                std::to_string(p.pid()) + "' puts the bytes back");
  }
  step_over_->prepare(site);
}

Placement TraceRun::place(const ResolvedProbe& probe,
                          std::map<std::uint64_t, std::size_t>& jump_at) {
  Placement pl;
  if (jumps_ && !probe.implementation.empty()) {
    // glibc's IFUNC implementations are hand-written assembly with several entry points:
    // __mempcpy_avx512_unaligned_erms jumps to the second instruction of
    // __memmove_avx512_unaligned_erms, from outside the function the planner decodes. A jump
    // over the first bytes would send such a branch into the middle of the jmp (SIGILL).
    pl.why_not_jump = "an IFUNC implementation (" + probe.implementation +
                      "): other functions branch into its first bytes";
    if (opts_.via == "jump") {
      throw UsageError("cannot patch a jump at " + probe.spec + " (" + probe.address.hex() +
                       ") in process " + std::to_string(proc_->pid()) + ": " + pl.why_not_jump +
                       " (--via auto falls back to int3 there)");
    }
  } else if (jumps_) {
    auto known = jump_at.find(probe.address.value());
    if (known != jump_at.end()) {
      pl.jump = known->second;
    } else {
      pl.jump =
          jumps_->add(probe.address, *symbols_, static_cast<std::uint32_t>(jumps_->size() + 1),
                      probe.spec, pl.why_not_jump);
      if (pl.jump) jump_at[probe.address.value()] = *pl.jump;
    }
    if (!pl.jump && opts_.via == "jump") {
      throw UsageError("cannot patch a jump at " + probe.spec + " (" + probe.address.hex() +
                       ") in process " + std::to_string(proc_->pid()) + ": " + pl.why_not_jump +
                       " (--via auto falls back to int3 there)");
    }
  }
  if (!pl.jump) enable_int3(probe);
  return pl;
}

// Every probe in, with every thread stopped: a jump where --via allows and the site
// qualifies, else an int3.
void TraceRun::install_image() {
  TracedProcess& p = *proc_;
  bool first = !symbols_;
  symbols_ = std::make_unique<ProcessSymbols>(p.proc_tid());
  report_.images.push_back(symbols_->executable());
  probes_ = resolve(first);
  step_over_ = make_step_over(opts_.step_over, p.memory(),
                              [&p](RuntimeAddr near) { return p.map_scratch(near); });
  jumps_.reset();
  if (opts_.via != "int3" && !opts_.stacks) {
    JumpOptions jo;
    jo.events = opts_.events;
    jo.event_sites = static_cast<std::uint32_t>(std::max<std::size_t>(probes_.size(), 1));
    jumps_ = std::make_unique<JumpProbes>(p, jo);
  }
  refuse_leftovers();
  placements_.clear();
  std::map<std::uint64_t, std::size_t> jump_at;
  for (const auto& probe : probes_) placements_.push_back(place(probe, jump_at));
}

// A jump a probecost that died left at a probe's address: probing over it would make nonsense
// of both (an int3 over its jmp, or a plan over its bytes). The bytes must go back first.
void TraceRun::refuse_leftovers() {
  std::vector<std::string> notes;
  for (const auto& area : read_jump_areas(*proc_, notes)) {
    for (const auto& site : area.sites) {
      std::vector<std::uint8_t> now(site.patch.length);
      proc_->memory().read(site.patch.site, now);
      if (patch_state(site.patch, now) == PatchState::Original) continue;
      for (const auto& probe : probes_) {
        std::int64_t off = probe.address - site.patch.site;
        if (off < 0 || off >= static_cast<std::int64_t>(site.patch.length)) continue;
        throw Error("cannot probe " + probe.spec + " (" + probe.symbol + " at " +
                    probe.address.hex() + ") in process " + std::to_string(proc_->pid()) +
                    ": a jump probe that probecost (process " + std::to_string(area.tracer_pid) +
                    ") left there is still in. 'probecost restore -p " +
                    std::to_string(proc_->pid()) + "' puts the bytes back");
      }
    }
  }
}

std::uint64_t TraceRun::jump_hits() const {
  std::uint64_t n = 0;
  for (std::size_t i = 0; jumps_ && i < jumps_->size(); ++i) n += jumps_->hits(i);
  return n;
}

Session::End TraceRun::run_session(Session& session) {
  return session.run(nullptr, [&] {
    double t = now_s();
    if (proc_->alive()) tracee_last_ = proc_->cpu_seconds();
    if (opts_.on_tick && proc_->alive()) opts_.on_tick(proc_->pid());
    for (std::size_t i = 0; jumps_ && jumps_->events() && i < jumps_->size(); ++i) jumps_->drain(i);
    if (opts_.progress && t >= next_progress_) {
      next_progress_ += 1;
      std::uint64_t hits = session.stats().hits + jump_hits();
      notes_ << "\r\033[K[" << static_cast<int>(t - t0_) << "s] " << hits << " hits ("
             << static_cast<std::uint64_t>(hits / (t - t0_)) << "/s)" << std::flush;
    }
    return false;
  });
}

// The current image's results, once its probes are out (or its address space is gone): jump
// counts and rings are final then.
void TraceRun::close_image() {
  for (std::size_t i = 0; i < std::min(probes_.size(), placements_.size()); ++i) {
    ProbeReport pr;
    pr.probe = probes_[i];
    pr.image = report_.images.back();
    pr.why_not_jump = placements_[i].why_not_jump;
    if (auto j = placements_[i].jump) {
      pr.via = "jump";
      if (jumps_->events()) jumps_->drain(*j, true);
      pr.hits = jumps_->hits(*j);
      pr.events_read = jumps_->records_read(*j);
      pr.events_lost = jumps_->records_lost(*j);
      pr.step_over = "jump over " + std::to_string(jumps_->patched_length(*j)) + " bytes";
    } else {
      pr.via = "int3";
      BreakpointSite* site = proc_->sites().find(probes_[i].address);
      pr.hits = site ? site->hits : 0;
      pr.step_over = site ? step_over_->describe(*site) : "";
      pr.threads = rec_.threads_by_site[probes_[i].address.value()];
      pr.stacks = rec_.top_stacks(probes_[i].address.value());
    }
    report_.probes.push_back(pr);
  }
  report_.hits += jump_hits();  // int3 hits come from the session's count, over every image
  rec_.forget_image();
}

// Every way out: the tracee is left as it was (or, asked for, killed).
void TraceRun::let_go() {
  TracedProcess& p = *proc_;
  if (p.alive()) tracee_last_ = p.cpu_seconds();
  if (p.launched() && !p.end()) {
    if (opts_.kill_on_exit) {
      // Killed on request: its status is ours, not the command's (probecost exits 0).
      p.kill();
      report_.command_end = "killed by probecost (--kill-on-exit)";
    } else {
      p.detach();
      // It may have ended while we let go of it (reaped by the detach's waits).
      report_.command_status =
          p.end() ? std::optional<int>(p.end()->raw()) : wait_for_command(p.pid());
      report_.command_end = report_.command_status
                                ? WaitStatus(*report_.command_status).describe()
                                : "still running (probecost stopped waiting for it)";
    }
  } else if (p.launched()) {
    report_.command_end = p.end()->describe();
    report_.command_status = p.end()->raw();
    tracee_last_ = p.cpu_seconds();
  } else {
    p.detach();
  }
}

TraceReport TraceRun::run() {
  TracedProcess& p = *proc_;
  report_.pid = p.pid();
  report_.launched = p.launched();
  report_.stacks = opts_.stacks;
  if (!p.launched()) p.start_guardian();
  // Interrupted while starting: nothing goes in, and the process is let go as it is.
  if (stop_requested()) {
    step_over_ = std::make_unique<SingleStepOver>();  // no site: never used
  } else {
    try {
      install_image();
    } catch (const Error&) {
      // A write or an injected system call that failed because the process is exiting under
      // us: there is nothing to probe; the session reports its end.
      if (!p.dying()) throw;
      if (!step_over_) step_over_ = std::make_unique<SingleStepOver>();
    }
  }
  if (opts_.stacks) rec_.collector.emplace(opts_.stack_depth);
  Session session(p, *step_over_);
  session.set_hit_observer([&](pid_t tid, StoppedThread& thread, BreakpointSite& site) {
    if (++rec_.thread_hits[tid] == 1) rec_.thread_names[tid] = thread_name(p.pid(), tid);
    ++rec_.threads_by_site[site.address().value()][tid];
    if (rec_.collector) rec_.record_stack(*symbols_, tid, thread, site);
  });
  if (opts_.announce) {
    notes_ << "probecost trace: tracing process " << p.pid() << " (" << p.thread_count()
           << (p.thread_count() == 1 ? " thread" : " threads") << ") at " << probes_.size()
           << (probes_.size() == 1 ? " probe" : " probes") << "; Ctrl-C to stop" << std::endl;
  }
  t0_ = now_s();
  report_.held_s = t0_ - held_from_;
  double cpu0 = thread_cpu_s();
  tracee0_ = tracee_last_ = p.cpu_seconds();
  next_progress_ = t0_ + 1;
  std::uint64_t syscalls0 = sys::counters().total();
  if (opts_.duration_s > 0) session.set_deadline(t0_ + opts_.duration_s);
  Session::End end;
  for (;;) {
    end = run_session(session);
    if (end != Session::End::Exec || !opts_.follow_exec) break;
    // A new image: the old one's probes went with its address space.
    close_image();
    p.resume_after_exec();
    double held_from = now_s();  // the new image's probes going in, every thread stopped
    install_image();
    session.set_step_over(*step_over_);
    report_.held_s += now_s() - held_from;
    notes_ << "probecost trace: process " << p.pid() << " exec'd " << report_.images.back() << ": "
           << probes_.size() << (probes_.size() == 1 ? " probe" : " probes") << " in the new image"
           << std::endl;
  }
  report_.tracer_cpu_s = thread_cpu_s() - cpu0;
  if (opts_.progress) notes_ << "\r\033[K" << std::flush;
  report_.duration_s = now_s() - t0_;
  report_.ending = describe_end(end, p);
  std::uint64_t syscalls = sys::counters().total() - syscalls0;
  let_go();
  close_image();
  report_.thread_hits = rec_.thread_hits;
  report_.thread_names = rec_.thread_names;
  report_.hits += session.stats().hits;
  report_.syscalls_per_hit = report_.hits ? static_cast<double>(syscalls) / report_.hits : 0;
  report_.tracee_cpu_s = std::max(0.0, tracee_last_ - tracee0_);
  if (report_.hits) {
    report_.tracer_cpu_ns_per_hit = report_.tracer_cpu_s * 1e9 / report_.hits;
    report_.cpu_ns_per_hit = (report_.tracer_cpu_s + report_.tracee_cpu_s) * 1e9 / report_.hits;
  }
  report_.stack_ns_per_hit = report_.hits ? rec_.stack_seconds * 1e9 / report_.hits : 0;
  return report_;
}

}  // namespace

void check_via(const std::string& via) {
  if (via != "int3" && via != "jump" && via != "auto") {
    throw UsageError("unknown --via '" + via + "' (int3, jump or auto)");
  }
}

std::vector<Symbol> list_target_symbols(const TraceOptions& opts, const std::string& pattern) {
  auto proc = start_target(opts);
  return ProcessSymbols(proc->proc_tid()).list(pattern);
}

TraceReport run_trace(const TraceOptions& opts, std::ostream& notes) {
  check_via(opts.via);
  if (opts.stacks && opts.via == "jump") {
    throw UsageError(
        "--stacks needs int3 probes: a jump probe never stops the thread to unwind it "
        "(use --via int3, or auto, which uses int3 with --stacks)");
  }
  if (opts.events && opts.via == "int3") {
    throw UsageError("--events needs jump probes (--via jump or auto)");
  }
  return TraceRun(opts, notes).run();
}

}  // namespace probecost
