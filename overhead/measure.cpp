// Running a command untraced and traced by turns, and what the kernel says each run used; and
// what the runs share with the windows of a running process (attached.cpp).
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
#include "overhead/measure_parts.hpp"
#include "overhead/overhead.hpp"
#include "trace/trace.hpp"
#include "tracer/core/process.hpp"
#include "tracer/os/proc_files.hpp"
#include "tracer/os/ticker.hpp"

namespace probecost {

namespace overhead_parts {

namespace {

double seconds(const timeval& tv) {
  return tv.tv_sec + tv.tv_usec / 1e6;
}

}  // namespace

Usage Usage::of(int who) {
  rusage ru = {};
  ::getrusage(who, &ru);
  return {seconds(ru.ru_utime) + seconds(ru.ru_stime), static_cast<double>(ru.ru_nvcsw),
          static_cast<double>(ru.ru_nivcsw)};
}

double my_migrations() {
  std::ifstream in("/proc/thread-self/sched");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("se.nr_migrations", 0) == 0) return std::stod(line.substr(line.find(':') + 1));
  }
  return 0;
}

// Field 39 of /proc/PID/stat is the CPU the process's leader last ran on.
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
  o.via = cfg.via;
  o.step_over = cfg.step_over;
  o.kill_on_exit = true;  // interrupted: the command must not run on untraced, uncounted
  o.progress = false;
  o.announce = false;
  o.duration_s = cfg.pid ? cfg.duration_s : 0;
  return o;
}

void take_probes(const TraceReport& report, RunRecord& rec, Measurement& m) {
  rec.hits = report.hits;
  std::vector<ProbeUse> uses;
  std::vector<std::uint64_t> most;  // per row, the most hits one image had
  for (const auto& p : report.probes) {
    ProbeUse use{p.probe.spec, p.via, p.step_over, p.why_not_jump, p.method};
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
      uses[i] = use;  // the row says how the image with the most hits stepped over it
    }
  }
  m.probes = uses;
}

void take_tracer_figures(const TraceReport& report, const Usage& self0, double migrations0,
                         RunRecord& rec) {
  Usage self = Usage::of(RUSAGE_SELF) - self0;
  rec.tracer_migrations = my_migrations() - migrations0;
  rec.held_s = report.held_s;
  rec.tracer_cpu_s = report.tracer_cpu_s;
  rec.tracer_setup_cpu_s = std::max(0.0, self.cpu_s - report.tracer_cpu_s);
  rec.hits = report.hits;
}

std::string run_label(const char* what, unsigned i, unsigned n) {
  return std::string(what) + " " + std::to_string(i + 1) + "/" + std::to_string(n);
}

}  // namespace overhead_parts

namespace {

using namespace overhead_parts;

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
  rec.cpu_s = used.cpu_s;
  rec.voluntary_switches = used.voluntary;
  rec.involuntary_switches = used.involuntary;
  rec.end = ws.describe();
  rec.ok = ws.exited() && ws.exit_code() == 0;
  return rec;
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
  Usage children = Usage::of(RUSAGE_CHILDREN) - children0;
  take_tracer_figures(report, self0, migrations0, rec);
  // A command that execs (a wrapper script) is followed: the probes go into each new image,
  // and the time it is held stopped for that is in held_s too.
  rec.wall_s = t1 - t0 - report.held_s;
  rec.cpu_s = children.cpu_s;
  rec.voluntary_switches = children.voluntary;
  rec.involuntary_switches = children.involuntary;
  rec.end = report.command_end;
  rec.ok = report.command_status && WaitStatus(*report.command_status).exited() &&
           WaitStatus(*report.command_status).exit_code() == 0;
  take_probes(report, rec, m);
  return rec;
}

// Warm-up runs, then traced and untraced runs by turns: traced first in each pair, so that a
// probe that cannot be placed is known after the warm-up. A stop signal ends it: the pair it
// cut into is lost (its command was killed), the pairs before it are kept.
void measure_launched(const OverheadConfig& cfg, const CpuPlan& plan, Measurement& m,
                      const std::function<void(const std::string&)>& say) {
  m.warmup = cfg.warmup;
  for (unsigned i = 0; i < cfg.warmup && !stop_requested(); ++i) {
    say(run_label("warm-up run", i, cfg.warmup));
    untraced_run(cfg, plan);
  }
  for (unsigned i = 0; i < cfg.repeat && !stop_requested(); ++i) {
    say(run_label("traced run", i, cfg.repeat));
    RunRecord traced = traced_run(cfg, plan, m);
    if (stop_requested()) break;
    say(run_label("untraced run", i, cfg.repeat));
    RunRecord untraced = untraced_run(cfg, plan);
    if (stop_requested()) break;
    m.traced.push_back(traced);
    m.untraced.push_back(untraced);
  }
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
  m.planned = cfg.repeat;
  m.cpus_online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  CpuPlan plan = plan_cpus(cfg.placement, m.cpus_online);
  m.cpus = plan.describe();
  m.load_before = load_average();
  OthersCpuMeter others;
  auto say = [&](const std::string& what) {
    if (progress) progress(what);
  };
  if (m.attached) {
    measure_attached(cfg, m, say);
  } else {
    measure_launched(cfg, plan, m, say);
  }
  m.partial = m.partial || (stop_requested() && m.traced.size() < cfg.repeat);
  m.load_after = load_average();
  double watched = 0;  // an attached process is not ours: its CPU is not "other processes'"
  for (const auto* runs : {&m.untraced, &m.traced}) {
    for (const auto& run : *runs) watched += m.attached ? run.cpu_s : 0;
  }
  m.others_cpu_share = others.share(watched);
  return m;
}

}  // namespace probecost
