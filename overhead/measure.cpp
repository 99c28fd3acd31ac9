// Running a command untraced and traced by turns (or watching a running process for two
// windows), and what the kernel says each run used.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <ostream>

#include "common/clock.hpp"
#include "common/cpu.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "compare/machine.hpp"
#include "overhead/overhead.hpp"
#include "trace/trace.hpp"
#include "tracer/proc_files.hpp"
#include "tracer/process.hpp"
#include "tracer/ticker.hpp"

namespace probecost {

namespace {

double seconds(const timeval& tv) {
  return tv.tv_sec + tv.tv_usec / 1e6;
}

// CPU time and context switches from getrusage: RUSAGE_CHILDREN covers every descendant that
// was reaped (the command's whole tree, once it is over), RUSAGE_SELF probecost itself.
struct Usage {
  double cpu_s = 0, voluntary = 0, involuntary = 0;
  static Usage of(int who) {
    rusage ru = {};
    ::getrusage(who, &ru);
    return {seconds(ru.ru_utime) + seconds(ru.ru_stime), static_cast<double>(ru.ru_nvcsw),
            static_cast<double>(ru.ru_nivcsw)};
  }
  Usage operator-(const Usage& o) const {
    return {cpu_s - o.cpu_s, voluntary - o.voluntary, involuntary - o.involuntary};
  }
};

// How many times the calling thread moved to another CPU (se.nr_migrations of
// /proc/thread-self/sched; 0 when the kernel does not show it).
double my_migrations() {
  std::ifstream in("/proc/thread-self/sched");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("se.nr_migrations", 0) == 0) return std::stod(line.substr(line.find(':') + 1));
  }
  return 0;
}

// The command's standard streams for one run: stdin opened afresh (each run reads it from its
// start), stdout and stderr to /dev/null or to probecost's stderr.
struct Streams {
  Fd in, null;
  int out;
  explicit Streams(const OverheadConfig& cfg)
      : in(Fd::open(cfg.stdin_path, O_RDONLY)),
        null(Fd::open("/dev/null", O_WRONLY)),
        out(cfg.show_output ? STDERR_FILENO : null.get()) {}
};

void check_interrupted() {
  if (stop_requested()) throw Error("interrupted");
}

RunRecord untraced_run(const OverheadConfig& cfg, const CpuPlan& plan) {
  Streams io(cfg);
  LaunchSpec spec;
  spec.argv = cfg.command;
  spec.stdin_fd = io.in.get();
  spec.stdout_fd = spec.stderr_fd = io.out;
  spec.cpu = plan.tracee_cpu;
  RunRecord rec;
  Usage before = Usage::of(RUSAGE_CHILDREN);
  double t0 = now_s();
  WaitStatus ws = spawn_and_wait(spec);
  rec.wall_s = now_s() - t0;
  Usage used = Usage::of(RUSAGE_CHILDREN) - before;
  check_interrupted();
  rec.cpu_s = used.cpu_s;
  rec.voluntary_switches = used.voluntary;
  rec.involuntary_switches = used.involuntary;
  rec.end = ws.describe();
  rec.ok = ws.exited() && ws.exit_code() == 0;
  return rec;
}

// Every 100 ms of a traced run: does probecost run on another CPU than the command last ran
// on? Field 39 of /proc/PID/stat is the CPU the process's leader last ran on.
std::function<void(pid_t)> cpu_sampler(RunRecord& rec) {
  return [&rec](pid_t pid) {
    std::string cpu = stat_field(pid, 39);
    if (cpu.empty()) return;
    ++rec.cpu_samples;
    if (std::stoi(cpu) != sched_getcpu()) ++rec.cpu_samples_apart;
  };
}

TraceOptions trace_options(const OverheadConfig& cfg) {
  TraceOptions o;
  o.pid = cfg.pid;
  o.command = cfg.command;
  o.probes = cfg.probes;
  o.all_matches = cfg.all_matches;
  o.follow_forks = cfg.follow_forks;
  o.via = parse_via(cfg.via);
  o.step_over = parse_step_over(cfg.step_over);
  o.kill_on_exit = true;  // interrupted: the command must not run on untraced, uncounted
  o.progress = false;
  o.announce = false;
  o.duration_s = cfg.pid ? cfg.duration_s : 0;
  return o;
}

// One row per probe: a command that execs has its probes placed again in each new image, and
// the report's rows for the same probe placed the same way (int3 or jump) are summed. The
// row says how the image with the most hits stepped over it.
void take_probes(const TraceReport& report, RunRecord& rec, Measurement& m) {
  rec.hits = report.hits;
  std::vector<ProbeUse> uses;
  std::vector<std::uint64_t> most;  // per row, the most hits one image had
  for (const auto& p : report.probes) {
    ProbeUse use{p.probe.spec, via_name(p.via), p.step_over, p.why_not_jump};
    auto same = std::find_if(uses.begin(), uses.end(), [&](const ProbeUse& u) {
      return u.spec == use.spec && u.via == use.via;
    });
    if (same == uses.end()) {
      uses.push_back(use);
      rec.probe_hits.push_back(p.hits);
      most.push_back(p.hits);
      continue;
    }
    auto i = static_cast<std::size_t>(same - uses.begin());
    rec.probe_hits[i] += p.hits;
    if (p.hits > most[i]) {
      most[i] = p.hits;
      uses[i] = use;
    }
  }
  m.probes = uses;
}

RunRecord traced_run(const OverheadConfig& cfg, const CpuPlan& plan, Measurement& m) {
  Streams io(cfg);
  TraceOptions o = trace_options(cfg);
  o.stdin_fd = io.in.get();
  o.stdout_fd = o.stderr_fd = io.out;
  o.cpu = plan.tracee_cpu;
  RunRecord rec;
  o.on_tick = cpu_sampler(rec);
  PinThread pin(plan.tracer_cpu, "probecost");
  std::ostream no_notes(nullptr);
  Usage children0 = Usage::of(RUSAGE_CHILDREN), self0 = Usage::of(RUSAGE_SELF);
  double migrations0 = my_migrations();
  double t0 = now_s();
  TraceReport report = run_trace(o, no_notes);
  double t1 = now_s();
  Usage children = Usage::of(RUSAGE_CHILDREN) - children0, self = Usage::of(RUSAGE_SELF) - self0;
  rec.tracer_migrations = my_migrations() - migrations0;
  check_interrupted();
  // A command that execs (a wrapper script) is followed: the probes go into each new image,
  // and the time it is held stopped for that is in held_s too.
  rec.held_s = report.held_s;
  rec.wall_s = t1 - t0 - report.held_s;
  rec.cpu_s = children.cpu_s;
  rec.voluntary_switches = children.voluntary;
  rec.involuntary_switches = children.involuntary;
  rec.tracer_cpu_s = report.tracer_cpu_s;
  rec.tracer_setup_cpu_s = std::max(0.0, self.cpu_s - report.tracer_cpu_s);
  rec.end = report.command_end;
  rec.ok = report.command_status && WaitStatus(*report.command_status).exited() &&
           WaitStatus(*report.command_status).exit_code() == 0;
  take_probes(report, rec, m);
  return rec;
}

// The CPU time of a process's threads so far (fields 14 and 15 of /proc/PID/stat, in clock
// ticks: 10 ms), as the tracer reads it for an attached process. Error once it is gone.
double process_cpu_s(pid_t pid) {
  std::string utime = stat_field(pid, 14), stime = stat_field(pid, 15);
  if (utime.empty() || stime.empty()) {
    throw Error("process " + std::to_string(pid) + " ended while probecost watched it");
  }
  return static_cast<double>(std::stoull(utime) + std::stoull(stime)) / sysconf(_SC_CLK_TCK);
}

// Sleeps until `until` (CLOCK_MONOTONIC), or a stop request.
void sleep_until(double until) {
  for (double t = now_s(); t < until && !stop_requested(); t = now_s()) {
    double left = until - t;
    timespec nap{static_cast<time_t>(left), static_cast<long>((left - std::floor(left)) * 1e9)};
    ::nanosleep(&nap, nullptr);  // EINTR on a stop signal: looked at above
  }
}

RunRecord untraced_window(const OverheadConfig& cfg) {
  RunRecord rec;
  double cpu0 = process_cpu_s(cfg.pid), t0 = now_s();
  sleep_until(t0 + cfg.duration_s);
  check_interrupted();
  rec.cpu_s = process_cpu_s(cfg.pid) - cpu0;
  rec.wall_s = now_s() - t0;
  return rec;
}

RunRecord traced_window(const OverheadConfig& cfg, Measurement& m) {
  TraceOptions o = trace_options(cfg);
  RunRecord rec;
  o.on_tick = cpu_sampler(rec);
  std::ostream no_notes(nullptr);
  Usage self0 = Usage::of(RUSAGE_SELF);
  double migrations0 = my_migrations();
  TraceReport report = run_trace(o, no_notes);
  Usage self = Usage::of(RUSAGE_SELF) - self0;
  rec.tracer_migrations = my_migrations() - migrations0;
  check_interrupted();
  if (report.ending != "--duration reached") {
    throw Error("process " + std::to_string(cfg.pid) + " was not traced for the whole " +
                "window: " + report.ending);
  }
  rec.held_s = report.held_s;
  rec.wall_s = report.duration_s;
  rec.cpu_s = report.tracee_cpu_s;
  rec.tracer_cpu_s = report.tracer_cpu_s;
  rec.tracer_setup_cpu_s = std::max(0.0, self.cpu_s - report.tracer_cpu_s);
  take_probes(report, rec, m);
  return rec;
}

std::string run_label(const char* what, unsigned i, unsigned n) {
  return std::string(what) + " " + std::to_string(i + 1) + "/" + std::to_string(n);
}

}  // namespace

Measurement measure(const OverheadConfig& cfg,
                    const std::function<void(const std::string&)>& progress) {
  Measurement m;
  m.command = cfg.command;
  m.pid = cfg.pid;
  m.attached = cfg.pid != 0;
  m.duration_s = cfg.duration_s;
  m.via = cfg.via;
  m.step_over = cfg.step_over;
  m.placement = cfg.placement;
  m.stdin_path = cfg.stdin_path;
  m.show_output = cfg.show_output;
  m.cpus_online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  CpuPlan plan = plan_cpus(cfg.placement, m.cpus_online);
  m.cpus = plan.describe();
  m.load_before = load_average();
  OthersCpuMeter others;
  auto say = [&](const std::string& what) {
    if (progress) progress(what);
  };
  if (m.attached) {
    for (unsigned i = 0; i < cfg.repeat; ++i) {
      say(run_label("untraced window", i, cfg.repeat));
      m.untraced.push_back(untraced_window(cfg));
      say(run_label("traced window", i, cfg.repeat));
      m.traced.push_back(traced_window(cfg, m));
    }
  } else {
    m.warmup = cfg.warmup;
    for (unsigned i = 0; i < cfg.warmup; ++i) {
      say(run_label("warm-up run", i, cfg.warmup));
      untraced_run(cfg, plan);
    }
    // Traced first in each pair: a probe that cannot be placed is known after the warm-up.
    for (unsigned i = 0; i < cfg.repeat; ++i) {
      say(run_label("traced run", i, cfg.repeat));
      m.traced.push_back(traced_run(cfg, plan, m));
      say(run_label("untraced run", i, cfg.repeat));
      m.untraced.push_back(untraced_run(cfg, plan));
    }
  }
  m.load_after = load_average();
  double watched = 0;  // an attached process is not ours: its CPU is not "other processes'"
  for (const auto* runs : {&m.untraced, &m.traced}) {
    for (const auto& run : *runs) watched += m.attached ? run.cpu_s : 0;
  }
  m.others_cpu_share = others.share(watched);
  return m;
}

}  // namespace probecost
