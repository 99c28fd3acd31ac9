// Watching a running process (-p PID). Its work has no end to time, so it is counted by the
// process's own events: where a jump fits the probes' sites, windows with jump probes there
// (the reference: a jump hit costs a few ns, so its rate is the untraced rate, near enough)
// alternate with windows of the mechanism under test, and the slowdown is the ratio of the two
// rates. Where no jump fits, an untraced window (its CPU alone) alternates with a traced one.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <ostream>
#include <set>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "overhead/measure_parts.hpp"
#include "tracer/os/proc_files.hpp"
#include "tracer/os/ticker.hpp"
#include "tracer/symbols/cannot_probe.hpp"

namespace probecost::overhead_parts {

namespace {

// How long the look at where jumps fit keeps the probes in: it needs none of their hits.
constexpr double kCheckSeconds = 0.001;
// A window a stop signal cut short still gives a rate, if it lasted this share of --duration.
constexpr double kShortestCutWindow = 0.1;

// The user's specs a report row stands for: the row of several probes at one address is
// "SPEC1, SPEC2" (in the order given), and a C++ spec may itself hold ", ", so the row is
// matched against the specs rather than split.
bool split_row(const std::string& row, std::size_t at, const std::vector<std::string>& specs,
               std::vector<std::string>& out) {
  if (at == row.size()) return true;
  for (const auto& s : specs) {
    if (row.compare(at, s.size(), s) != 0) continue;
    std::size_t end = at + s.size();
    if (end != row.size() && row.compare(end, 2, ", ") != 0) continue;
    out.push_back(s);
    if (split_row(row, end == row.size() ? end : end + 2, specs, out)) return true;
    out.pop_back();
  }
  return false;
}

std::vector<std::string> specs_of_row(const std::string& row,
                                      const std::vector<std::string>& specs) {
  std::vector<std::string> out;
  return split_row(row, 0, specs, out) ? out : std::vector<std::string>{row};
}

// The hits of a window at the reference's probes.
std::uint64_t hits_at(const TraceReport& report, const std::vector<std::string>& specs,
                      const std::vector<std::string>& reference) {
  std::uint64_t hits = 0;
  for (const auto& p : report.probes) {
    auto of = specs_of_row(p.probe.spec, specs);
    bool in = std::all_of(of.begin(), of.end(), [&](const std::string& s) {
      return std::find(reference.begin(), reference.end(), s) != reference.end();
    });
    hits += in ? p.hits : 0;
  }
  return hits;
}

// Where a jump fits: the probes go in as --via auto puts them, for a moment, and every probe
// that any of its rows has as an int3 is left out of the reference, with the reason.
void where_jumps_fit(const OverheadConfig& cfg, Measurement& m) {
  TraceOptions o = trace_options(cfg);
  o.via = Via::Auto;
  o.duration_s = kCheckSeconds;
  std::ostream no_notes(nullptr);
  TraceReport report = run_trace(o, no_notes);
  m.check_held_s = report.held_s;
  for (const auto& p : report.probes) {
    if (p.via == Via::Jump) continue;
    for (const auto& spec : specs_of_row(p.probe.spec, cfg.probes)) {
      bool known = std::any_of(m.no_jump.begin(), m.no_jump.end(),
                               [&](const NoJump& n) { return n.spec == spec; });
      if (!known) m.no_jump.push_back({spec, p.why_not_jump});
    }
  }
  for (const auto& spec : cfg.probes) {
    bool out = std::any_of(m.no_jump.begin(), m.no_jump.end(),
                           [&](const NoJump& n) { return n.spec == spec; });
    if (!out) m.reference_probes.push_back(spec);
  }
  if (cfg.via == Via::Jump && !m.no_jump.empty()) {
    throw CannotProbe("cannot patch a jump at " + m.no_jump.front().spec + " in process " +
                      std::to_string(cfg.pid) + ": " + m.no_jump.front().why +
                      " (--via auto falls back to int3 there)");
  }
}

// A thread's time on a CPU so far (/proc/PID/task/TID/schedstat, ns), and its state letter
// (field 3 of its stat); -1 and ' ' when it is gone or the kernel does not say.
struct ThreadRun {
  double ran_ns = -1;
  char state = ' ';
};

ThreadRun thread_run(pid_t pid, pid_t tid) {
  ThreadRun r;
  std::string dir = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/";
  std::ifstream sched(dir + "schedstat");
  sched >> r.ran_ns;
  std::string state = stat_field(tid, 3);
  r.state = state.empty() ? ' ' : state[0];
  return r;
}

// Between two windows, every thread of the process must run before the next window's probes
// go in. trace lets a thread go where it stopped, and that may be the out-of-line copy of an
// int3 probe's instruction or a jump's trampoline, both of which jump back to the instruction
// after the probed one; a jump patched over the site before the thread ran would send it into
// the middle of its jmp (SIGILL or SIGSEGV: a python3 under load, whose thread had not run a
// millisecond after the int3 window let it go at the copy's first byte). A thread that ran, or
// that sleeps in the kernel, has left the copy. Bounded: a thread starved longer is left to its
// luck.
void let_threads_leave_copies(pid_t pid) {
  constexpr double kMostSeconds = 2;
  std::map<pid_t, double> waiting;
  for (pid_t tid : task_ids(pid)) {
    ThreadRun r = thread_run(pid, tid);
    if (r.state == 'R' && r.ran_ns >= 0) waiting[tid] = r.ran_ns;
  }
  for (double until = now_s() + kMostSeconds; !waiting.empty() && now_s() < until;) {
    std::erase_if(waiting, [pid](const auto& w) {
      ThreadRun r = thread_run(pid, w.first);
      return r.state != 'R' || r.ran_ns != w.second;
    });
    if (waiting.empty()) break;
    timespec nap{0, 1'000'000};
    ::nanosleep(&nap, nullptr);
  }
}

// The CPU time of a process so far, from the same clock the tracer reads for an attached
// process. Error once it is gone.
double process_cpu_s(pid_t pid) {
  double s = process_cpu_seconds(pid);
  if (s < 0) throw Error("process " + std::to_string(pid) + " ended while probecost watched it");
  return s;
}

// Sleeps until `until` (CLOCK_MONOTONIC), or a stop request.
void sleep_until(double until) {
  for (double t = now_s(); t < until && !stop_requested(); t = now_s()) {
    double left = until - t;
    timespec nap{static_cast<time_t>(left), static_cast<long>((left - std::floor(left)) * 1e9)};
    ::nanosleep(&nap, nullptr);  // EINTR on a stop signal: looked at above
  }
}

// The process watched without probes: its CPU alone.
RunRecord untraced_window(const OverheadConfig& cfg) {
  RunRecord rec;
  double cpu0 = process_cpu_s(cfg.pid);
  rec.start_s = now_s();
  sleep_until(rec.start_s + cfg.duration_s);
  rec.cpu_s = process_cpu_s(cfg.pid) - cpu0;
  rec.end_s = now_s();
  rec.wall_s = rec.end_s - rec.start_s;
  rec.cut_short = stop_requested();
  return rec;
}

// `o.probes` in as `o.via` for --duration. Error when the process ended or exec'd meanwhile;
// a stop signal ends it early, cut_short.
RunRecord window(const OverheadConfig& cfg, TraceOptions o, TraceReport& report) {
  RunRecord rec;
  o.on_tick = cpu_sampler(rec);
  std::ostream no_notes(nullptr);
  Usage self0 = Usage::of(RUSAGE_SELF);
  double migrations0 = my_migrations();
  report = run_trace(o, no_notes);
  take_tracer_figures(report, self0, migrations0, rec);
  // The probes were in from when the process stopped being held (before that: reading its
  // symbols, attaching, the hold) for the window's duration.
  rec.start_s = report.start_s;
  rec.end_s = rec.start_s + report.duration_s;
  rec.cut_short = stop_requested();
  if (!rec.cut_short && report.ending != "--duration reached") {
    throw Error("process " + std::to_string(cfg.pid) + " was not traced for the whole " +
                "window: " + report.ending);
  }
  rec.wall_s = report.duration_s;
  rec.cpu_s = report.tracee_cpu_s;
  return rec;
}

RunRecord reference_window(const OverheadConfig& cfg, const Measurement& m) {
  TraceOptions o = trace_options(cfg);
  o.probes = m.reference_probes;
  o.via = Via::Jump;
  TraceReport report;
  RunRecord rec = window(cfg, o, report);
  rec.reference_hits = rec.hits;
  return rec;
}

RunRecord tested_window(const OverheadConfig& cfg, Measurement& m) {
  TraceReport report;
  RunRecord rec = window(cfg, trace_options(cfg), report);
  take_probes(report, rec, m);
  rec.reference_hits = hits_at(report, cfg.probes, m.reference_probes);
  return rec;
}

// A pair whose second window a stop signal cut still counts when that window gives a rate.
bool usable(const RunRecord& second, const OverheadConfig& cfg) {
  return !second.cut_short || second.wall_s >= kShortestCutWindow * cfg.duration_s;
}

}  // namespace

void measure_attached(const OverheadConfig& cfg, Measurement& m,
                      const std::function<void(const std::string&)>& say) {
  say("where jumps fit");
  where_jumps_fit(cfg, m);
  let_threads_leave_copies(cfg.pid);
  if (stop_requested()) return;
  bool jump_reference = !m.reference_probes.empty();
  m.reference = jump_reference ? Reference::Jump : Reference::Untraced;
  for (unsigned i = 0; i < cfg.repeat && !stop_requested(); ++i) {
    say(run_label(jump_reference ? "reference window (jumps)" : "untraced window", i, cfg.repeat));
    RunRecord first = jump_reference ? reference_window(cfg, m) : untraced_window(cfg);
    if (first.cut_short) break;
    let_threads_leave_copies(cfg.pid);
    say(run_label("traced window", i, cfg.repeat));
    RunRecord second = tested_window(cfg, m);
    let_threads_leave_copies(cfg.pid);
    if (!usable(second, cfg)) break;
    m.untraced.push_back(first);
    m.traced.push_back(second);
    m.partial = second.cut_short;
  }
}

}  // namespace probecost::overhead_parts
