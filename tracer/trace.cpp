#include "tracer/trace.hpp"

#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
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
  std::map<std::uint64_t, std::set<pid_t>> threads_by_site;
  std::map<pid_t, std::uint64_t> thread_hits;
  std::map<std::uint64_t, std::map<std::vector<std::uint64_t>, std::uint64_t>> stacks;
  std::unordered_map<std::uint64_t, std::string> frame_names;
  std::optional<StackCollector> collector;
  double stack_seconds = 0;
};

void record_stack(Recorder& rec, const ProcessSymbols& symbols_const, ProcessSymbols& symbols,
                  pid_t tid, StoppedThread& thread, BreakpointSite& site) {
  double t0 = now_s();
  // Unwind from the site itself, not from one past the int3: the unwind tables describe the
  // site's first instruction as not yet executed.
  thread.set_pc(site.address());
  auto ips = rec.collector->capture(tid);
  for (std::size_t i = 0; i < ips.size(); ++i) {
    // Return addresses point after the call: look up ip-1 for the caller's line (frame 0 is
    // the site itself).
    std::uint64_t ip = i == 0 ? ips[i] : ips[i] - 1;
    if (rec.frame_names.count(ip)) continue;
    std::string name = symbols_const.describe(RuntimeAddr(ip));
    if (name.rfind("0x", 0) == 0) {  // unknown: a library loaded since? look again once
      symbols.refresh();
      name = symbols.describe(RuntimeAddr(ip));
    }
    rec.frame_names[ip] = name;
  }
  ++rec.stacks[site.address().value()][ips];
  rec.stack_seconds += now_s() - t0;
}

std::vector<StackCount> top_stacks(const Recorder& rec, std::uint64_t site) {
  std::vector<StackCount> out;
  auto it = rec.stacks.find(site);
  if (it == rec.stacks.end()) return out;
  for (const auto& [ips, count] : it->second) {
    StackCount sc;
    sc.count = count;
    for (std::size_t i = 0; i < ips.size(); ++i) {
      sc.frames.push_back(rec.frame_names.at(i == 0 ? ips[i] : ips[i] - 1));
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

// After we let go of a launched command: by default it runs to its end, untraced.
std::string wait_for_command(pid_t pid) {
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid) return WaitStatus(status).describe();
    if (r < 0 && errno == EINTR && !stop_requested()) continue;
    return "still running (probecost stopped waiting for it)";
  }
}

}  // namespace

std::vector<Symbol> list_target_symbols(const TraceOptions& opts, const std::string& pattern) {
  auto proc = start_target(opts);
  return ProcessSymbols(proc->proc_tid()).list(pattern);
}

void check_via(const std::string& via) {
  if (via != "int3" && via != "jump" && via != "auto") {
    throw UsageError("unknown --via '" + via + "' (int3, jump or auto)");
  }
}

namespace {

// How one probe is in: an int3 site, or a jump probe (its index in JumpProbes).
struct Placement {
  std::optional<std::size_t> jump;
  std::string why_not_jump;
};

void enable_int3(TracedProcess& p, const ResolvedProbe& probe, StepOver& step_over) {
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
  step_over.prepare(site);
}

// Every probe in, with every thread stopped: a jump where --via allows and the site qualifies,
// else an int3.
std::vector<Placement> install_probes(TracedProcess& p, const std::vector<ResolvedProbe>& probes,
                                      const TraceOptions& opts, StepOver& step_over,
                                      JumpProbes* jumps, const ProcessSymbols& symbols) {
  std::vector<Placement> out;
  std::map<std::uint64_t, std::size_t> jump_at;  // two specs naming one address share a probe
  for (const auto& probe : probes) {
    Placement pl;
    if (jumps) {
      auto known = jump_at.find(probe.address.value());
      if (known != jump_at.end()) {
        pl.jump = known->second;
      } else {
        pl.jump = jumps->add(probe.address, symbols, static_cast<std::uint32_t>(jumps->size() + 1),
                             probe.spec, pl.why_not_jump);
        if (pl.jump) jump_at[probe.address.value()] = *pl.jump;
      }
      if (!pl.jump && opts.via == "jump") {
        throw UsageError("cannot patch a jump at " + probe.spec + " (" + probe.address.hex() +
                         ") in process " + std::to_string(p.pid()) + ": " + pl.why_not_jump +
                         " (--via auto falls back to int3 there)");
      }
    }
    if (!pl.jump) enable_int3(p, probe, step_over);
    out.push_back(pl);
  }
  return out;
}

std::uint64_t jump_hits(const JumpProbes* jumps) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; jumps && i < jumps->size(); ++i) n += jumps->hits(i);
  return n;
}

}  // namespace

TraceReport run_trace(const TraceOptions& opts, std::ostream& notes) {
  check_via(opts.via);
  if (opts.stacks && opts.via == "jump") {
    throw UsageError(
        "--stacks needs int3 probes: a jump probe never stops the thread to unwind it "
        "(use --via int3, or auto, which uses int3 with --stacks)");
  }
  if (opts.events && opts.via == "int3")
    throw UsageError("--events needs jump probes (--via jump or auto)");
  TraceReport report;
  auto proc = start_target(opts);
  double held_from = now_s();  // every thread is stopped from here until the session runs
  TracedProcess& p = *proc;
  report.pid = p.pid();
  report.launched = p.launched();
  report.stacks = opts.stacks;
  ProcessSymbols symbols(p.proc_tid());
  auto probes = resolve_probes(opts.probes, symbols, p.memory(), p.proc_tid(), opts.all_matches);

  auto step_over = make_step_over(opts.step_over, p.memory(),
                                  [&p](RuntimeAddr near) { return p.map_scratch(near); });
  if (!p.launched()) p.start_guardian();
  std::unique_ptr<JumpProbes> jumps;
  if (opts.via != "int3" && !opts.stacks) {
    JumpOptions jo;
    jo.events = opts.events;
    jo.event_sites = static_cast<std::uint32_t>(probes.size());
    jumps = std::make_unique<JumpProbes>(p, jo);
  }
  auto placements = install_probes(p, probes, opts, *step_over, jumps.get(), symbols);
  Recorder rec;
  if (opts.stacks) rec.collector.emplace(opts.stack_depth);
  Session session(p, *step_over);
  session.set_hit_observer([&](pid_t tid, StoppedThread& thread, BreakpointSite& site) {
    ++rec.thread_hits[tid];
    rec.threads_by_site[site.address().value()].insert(tid);
    if (rec.collector) record_stack(rec, symbols, symbols, tid, thread, site);
  });

  if (opts.announce) {
    notes << "probecost trace: tracing process " << p.pid() << " (" << p.thread_count()
          << (p.thread_count() == 1 ? " thread" : " threads") << ") at " << probes.size()
          << (probes.size() == 1 ? " probe" : " probes") << "; Ctrl-C to stop" << std::endl;
  }
  double t0 = now_s(), cpu0 = thread_cpu_s(), tracee0 = p.cpu_seconds(), tracee_last = tracee0;
  report.held_s = t0 - held_from;
  double next_progress = t0 + 1;
  std::uint64_t syscalls0 = sys::counters().total();
  if (opts.duration_s > 0) session.set_deadline(t0 + opts.duration_s);
  Session::End end = session.run(nullptr, [&] {
    double t = now_s();
    if (p.alive()) tracee_last = p.cpu_seconds();
    if (opts.on_tick && p.alive()) opts.on_tick(p.pid());
    for (std::size_t i = 0; jumps && jumps->events() && i < jumps->size(); ++i) jumps->drain(i);
    if (opts.progress && t >= next_progress) {
      next_progress += 1;
      std::uint64_t hits = session.stats().hits + jump_hits(jumps.get());
      notes << "\r\033[K[" << static_cast<int>(t - t0) << "s] " << hits << " hits ("
            << static_cast<std::uint64_t>(hits / (t - t0)) << "/s)" << std::flush;
    }
    return false;
  });
  double t1 = now_s();
  report.tracer_cpu_s = thread_cpu_s() - cpu0;
  if (opts.progress) notes << "\r\033[K" << std::flush;
  report.duration_s = t1 - t0;
  report.ending = describe_end(end, p);
  std::uint64_t syscalls = sys::counters().total() - syscalls0;
  report.thread_hits = rec.thread_hits;

  // Every way out: the tracee is left as it was (or, asked for, killed).
  if (p.alive()) tracee_last = p.cpu_seconds();
  if (p.launched() && !p.end()) {
    if (opts.kill_on_exit) {
      p.kill();
      report.command_end = "killed by probecost (--kill-on-exit)";
    } else {
      p.detach();
      report.command_end = wait_for_command(p.pid());
    }
  } else if (p.launched()) {
    report.command_end = p.end()->describe();
    report.command_status = p.end()->raw();
    tracee_last = p.cpu_seconds();
  } else {
    p.detach();
  }
  // Jump probes are out now (or the process is gone): their counts and rings are final.
  for (std::size_t i = 0; i < probes.size(); ++i) {
    ProbeReport pr;
    pr.probe = probes[i];
    pr.why_not_jump = placements[i].why_not_jump;
    if (auto j = placements[i].jump) {
      pr.via = "jump";
      if (jumps->events()) jumps->drain(*j, true);
      pr.hits = jumps->hits(*j);
      pr.events_read = jumps->records_read(*j);
      pr.events_lost = jumps->records_lost(*j);
      pr.step_over = "jump over " + std::to_string(jumps->patched_length(*j)) + " bytes";
    } else {
      pr.via = "int3";
      BreakpointSite* site = p.sites().find(probes[i].address);
      pr.hits = site ? site->hits : 0;
      pr.step_over = site ? step_over->describe(*site) : "";
      pr.threads = rec.threads_by_site[probes[i].address.value()];
      pr.stacks = top_stacks(rec, probes[i].address.value());
    }
    report.probes.push_back(pr);
  }
  report.hits = session.stats().hits + jump_hits(jumps.get());
  report.syscalls_per_hit = report.hits ? static_cast<double>(syscalls) / report.hits : 0;
  report.tracee_cpu_s = std::max(0.0, tracee_last - tracee0);
  if (report.hits) {
    report.tracer_cpu_ns_per_hit = report.tracer_cpu_s * 1e9 / report.hits;
    report.cpu_ns_per_hit = (report.tracer_cpu_s + report.tracee_cpu_s) * 1e9 / report.hits;
  }
  report.stack_ns_per_hit = report.hits ? rec.stack_seconds * 1e9 / report.hits : 0;
  return report;
}

}  // namespace probecost
