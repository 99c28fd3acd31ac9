#include "compare/runner.hpp"

#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <bit>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "common/clock.hpp"
#include "common/cpu.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "compare/stats.hpp"
#include "compare/uprobe_run.hpp"
#include "tracer/core/event_loop.hpp"
#include "tracer/jump/jump_probes.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/os/proc_files.hpp"
#include "tracer/os/syscalls.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost {

namespace {

// The CPU a process last ran on: field 39 of /proc/PID/stat.
int last_cpu_of(pid_t pid) {
  std::string cpu = stat_field(pid, 39);
  if (cpu.empty()) throw Error("process " + std::to_string(pid) + " is gone");
  return std::stoi(cpu);
}

// An anonymous file for the inferior's stdout: read back whole after it exits, never blocks.
class CaptureFile {
 public:
  CaptureFile() : fd_(memfd_create("probecost-inferior-report", MFD_CLOEXEC)) {
    if (!fd_) throw Error::from_errno("memfd_create");
  }
  int fd() const { return fd_.get(); }
  std::string contents() const {
    std::string out;
    char buf[65536];
    ssize_t n;
    off_t off = 0;
    while ((n = ::pread(fd_.get(), buf, sizeof buf, off)) > 0) {
      out.append(buf, n);
      off += n;
    }
    return out;
  }

 private:
  Fd fd_;
};

void fill_from_report(const std::string& text, const Mechanism& m, Sample& s) {
  nlohmann::json r;
  try {
    r = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("the inferior's report is not JSON (" + std::string(e.what()) + "): " + text);
  }
  std::vector<double> ns, cycles;
  std::uint64_t traps = 0, records = 0;
  std::uint64_t start = UINT64_MAX, end = 0;
  for (const auto& t : r.at("threads")) {
    double n = static_cast<double>(s.iterations);
    ns.push_back(t.at("ns").get<double>() / n);
    cycles.push_back(t.at("cycles").get<double>() / n);
    s.tracee_cpu_ns += t.at("cpu_ns").get<double>();
    s.tracee_minflt += t.value("minflt", std::uint64_t{0});
    start = std::min(start, t.value("start_ns", std::uint64_t{0}));
    end = std::max(end, t.value("end_ns", std::uint64_t{0}));
    s.site_calls += t.at("calls").get<std::uint64_t>();
    traps += t.at("traps").get<std::uint64_t>();
    s.tracee_cpus_seen.push_back(t.at("cpu").get<int>());
    if (t.contains("marker")) {
      records += t["marker"].at("written").get<std::uint64_t>();
      if (!t["marker"].at("valid").get<bool>()) {
        s.marker_valid = false;
        s.problem = "marker records wrong: " + t["marker"].at("problem").get<std::string>();
      }
    }
  }
  s.wall_ns = end > start ? static_cast<double>(end - start) : 0;
  s.checksum = r.value("checksum", std::uint64_t{0});
  s.slot = r.value("slot", std::uint64_t{0});
  s.ns_per_iter = summarize(ns).median;
  s.cycles_per_iter = summarize(cycles).median;
  switch (m.hits) {
    case HitSource::SiteCalls:
      s.hits = s.site_calls;
      break;
    case HitSource::MarkerRecords:
      s.hits = records;
      break;
    case HitSource::SignalTraps:
      s.hits = traps;
      break;
    case HitSource::TracerHits:
    case HitSource::KernelUprobe:
      break;  // filled by the tracer, or from the kernel's counters
  }
}

std::vector<std::string> inferior_argv(const Mechanism& m, const RunConfig& cfg,
                                       std::uint64_t iterations) {
  std::vector<std::string> argv = {cfg.inferior};
  argv.insert(argv.end(), m.inferior_args.begin(), m.inferior_args.end());
  for (const std::string& a :
       {std::string("--iterations"), std::to_string(iterations), std::string("--threads"),
        std::to_string(cfg.threads), std::string("--work"), cfg.work}) {
    argv.push_back(a);
  }
  if (!cfg.cpus.thread_cpus.empty()) {
    std::string cpus;
    for (int c : cfg.cpus.thread_cpus) {
      if (!cpus.empty()) cpus += ',';
      cpus += std::to_string(c);  // appended: GCC 12 warns wrongly (PR 105651) on "," + string
    }
    argv.push_back("--pin-threads");
    argv.push_back(cpus);
  }
  return argv;
}

void run_untraced(const LaunchSpec& spec, Sample&) {
  WaitStatus ws = spawn_and_wait(spec);
  if (!ws.exited() || ws.exit_code() != 0) throw Error("the inferior " + ws.describe());
}

constexpr std::uint32_t kJumpEventId = 1;

void check_exit(TracedProcess& p) {
  const auto& status = p.end();
  if (!status || !status->exited() || status->exit_code() != 0) {
    throw Error("the traced inferior " + (status ? status->describe() : std::string("vanished")));
  }
}

StepOverChoice strategy_for(const Mechanism& m, const RunConfig& cfg) {
  if (!m.step_over) throw Error("mechanism " + m.name + " has an int3 site and no step-over");
  // int3-ptrace stays the classic reference whatever --step-over says.
  return (m.step_over == StepOverChoice::Auto && cfg.step_over) ? *cfg.step_over : *m.step_over;
}

// An int3 on each of the inferior's spare sites, never hit: what many installed probes cost a
// hit elsewhere (the tracer's site lookup).
std::uint64_t add_spare_sites(TracedProcess& p, StepOver& step_over, unsigned count) {
  Symbol base = ProcessSymbols(p.pid()).resolve(kSpareSitesSymbol);
  std::uint64_t n = 0;
  for (std::uint64_t off = 0; n < count && off + kSpareSiteBytes <= base.size;
       off += kSpareSiteBytes, ++n) {
    add_int3_probe(p, step_over, base.address + off, kSpareSitesSymbol);
  }
  return n;
}

// A run with no int3 and nothing for the tracer to do per hit (jump, record): it only waits for
// the end. Fills the tracer's CPU time, system calls and stops.
RunEnd run_without_traps(Family& family, Sample& s) {
  SingleStepOver unused;
  Session session(family.root(), unused);
  sys::Counters before = sys::counters();
  double cpu0 = thread_cpu_ns();
  RunEnd end = run_session(family, session);
  s.tracer_cpu_ns = thread_cpu_ns() - cpu0;
  s.tracer_syscalls = sys::counters().total() - before.total();
  s.tracer_stops = session.stats().stops;
  return end;
}

// The jump mechanism: no int3. The site is patched once, at exec, into a jump to a trampoline
// that writes the marker's record {TSC, id, arg} into a ring shared with the tracer (which
// overwrites its oldest records, as the marker's per-thread ring does); the tracer only waits
// for the end, then reads the ring and checks records + lost = hits.
void run_jump(const Mechanism& m, Family& family, Sample& s) {
  TracedProcess& p = family.root();
  ProcessSymbols symbols(p.pid());
  Symbol sym = symbols.resolve(m.probe_symbol);
  JumpOptions options;
  options.events = true;
  options.event_sites = 1;
  JumpProbes jumps(p, options);
  std::string why;
  auto probe = jumps.add(sym.address, symbols, kJumpEventId, sym.name, why);
  if (!probe) throw Error("cannot patch a jump at " + sym.name + ": " + why);
  s.step_over_plan = "jump over " + std::to_string(jumps.patched_length(*probe)) + " bytes";
  populate_jump_areas(p);
  RunEnd end = run_without_traps(family, s);
  // Records are read after the run and outside its CPU time, as the marker's are: a consumer's
  // cost is not the probe's (and reading all of a short run's records, but only the last
  // ring's worth of a long one's, would make the figure depend on the run's length).
  jumps.drain(*probe, true);
  s.hits = jumps.hits(*probe);
  if (jumps.records_read(*probe) + jumps.records_lost(*probe) != s.hits) {
    s.problem = "jump records: " + std::to_string(jumps.records_read(*probe)) + " read + " +
                std::to_string(jumps.records_lost(*probe)) + " lost != " + std::to_string(s.hits) +
                " hits";
  }
  if (end == RunEnd::Interrupted) throw Error("interrupted");
}

// Per CPU, room for every record of the run (a record dropped for want of room costs less than
// one written: the figure would be too low), within 1 GiB in all, since it is faulted in first;
// and for the sync records among them (call_buffer.hpp: one per sub-buffer, per thread switch,
// per ~6 ms), far fewer than 1 in 16.
std::uint64_t call_buffer_bytes(const Sample& s, std::uint32_t record_size) {
  constexpr std::uint64_t kMin = 1 << 20, kAll = 1ull << 30;
  std::uint64_t need = 2 * s.iterations * s.threads * record_size;
  need += need / 16;
  std::uint64_t cap = std::bit_floor(kAll / std::max(1, get_nprocs_conf()));
  return std::clamp(std::bit_ceil(need), kMin, std::max(kMin, cap));
}

// The record mechanism: `probecost record`'s probes on the probe site. The site is short, so
// it is patched whole: its entry and its ret under one jump, whose trampoline writes an entry
// record {TSC, thread pointer, sp, arg} and an exit record {.., rax} into the per-CPU call
// buffer, each in a restartable sequence. As for jump, the records are read after the run. A
// process without glibc's rseq registration has no call buffer: the row is skipped.
void run_record(const Mechanism& m, Family& family, Sample& s) {
  TracedProcess& p = family.root();
  // glibc registers each thread's rseq area before the executable's entry point, not at exec.
  p.run_to_entry();
  ProcessSymbols symbols(p.pid());
  Symbol sym = symbols.resolve(m.probe_symbol);
  JumpOptions options;
  options.calls.args = 1;
  options.calls.max_ids = 1;
  options.calls.buffer_bytes = call_buffer_bytes(s, jump::call_record_size(1));
  JumpProbes jumps(p, options);
  CallInstall in = jumps.add_calls({{sym.address, 0, sym.name}}, {}, symbols).at(0);
  if (!jumps.calls_refused().empty()) {
    s.skipped = jumps.calls_refused();
    return;
  }
  if (!in.undecodable.empty() || !in.entry_jump || !in.int3_exits.empty())
    throw Error("cannot record " + sym.name +
                " with jumps alone: " + (in.undecodable.empty() ? in.why_entry : in.undecodable) +
                (in.int3_exits.empty() ? "" : in.int3_exits.front().why_not_jump));
  s.step_over_plan =
      in.whole ? "entry and ret under one jump"
               : "a jump at the entry, " + std::to_string(in.exit_jumps) + " at its exits";
  populate_jump_areas(p);
  RunEnd end = run_without_traps(family, s);
  jump::CallReader& reader = *jumps.call_reader();
  reader.poll(__rdtsc(), true);
  std::vector<jump::CallRecord> records;
  reader.take(records);
  auto exits = static_cast<std::uint64_t>(
      std::count_if(records.begin(), records.end(), [](const auto& r) { return r.exit; }));
  s.hits = records.size() - exits;
  if (reader.lost_total() || exits != s.hits) {
    s.problem = "call records: " + std::to_string(s.hits) + " entries, " + std::to_string(exits) +
                " exits, " + std::to_string(reader.lost_total()) + " lost for want of room";
  }
  if (end == RunEnd::Interrupted) throw Error("interrupted");
}

void run_traced(const Mechanism& m, const LaunchSpec& spec, const RunConfig& cfg, Sample& s) {
  std::optional<PinThread> pin(
      std::in_place, cfg.cpus.tracer_cpu == kFollowTracee ? -1 : cfg.cpus.tracer_cpu, "the tracer");
  auto family = Family::launch(spec);
  TracedProcess& p = family->root();
  if (cfg.cpus.tracer_cpu == kFollowTracee) pin.emplace(last_cpu_of(p.pid()), "the tracer");
  if (m.jump() || m.is(MechanismId::Record)) {
    m.jump() ? run_jump(m, *family, s) : run_record(m, *family, s);
    if (s.skipped.empty()) check_exit(p);
    return;
  }
  std::unique_ptr<StepOver> step_over;
  if (m.floor()) {
    step_over = std::make_unique<SingleStepOver>();  // never used: there is no site
  } else {
    // Stopped at exec: the executable is mapped (at its ASLR base), main() has not run.
    Symbol sym = ProcessSymbols(p.pid()).resolve(m.probe_symbol);
    step_over = make_step_over(strategy_for(m, cfg), p.memory(),
                               [&p](RuntimeAddr near) { return p.map_scratch(near); });
    BreakpointSite& site = add_int3_probe(p, *step_over, sym.address, sym.name);
    s.step_over_plan = step_over->describe(site);
    if (cfg.spare_probes) s.spare_probes = add_spare_sites(p, *step_over, cfg.spare_probes);
  }
  Session session(p, *step_over);
  std::uint64_t floor_hits = 0;
  if (m.floor()) {
    // The ptrace floor: every SIGTRAP is a compiled-in int3 to count and resume, nothing more
    // (no register, siginfo or memory access).
    session.set_trap_hook([&floor_hits](Task&) {
      ++floor_hits;
      return true;
    });
  }
  // cfg.handlers counting handlers, all run on every hit (the tracer's own count aside).
  s.handler_hits.assign(cfg.handlers, 0);
  if (cfg.handlers > 0) {
    session.set_hit_observer([&s](pid_t, StoppedThread&, BreakpointSite&) {
      for (auto& count : s.handler_hits) ++count;
    });
  }

  sys::Counters before = sys::counters();
  double cpu0 = thread_cpu_ns();
  RunEnd end = run_session(*family, session);
  s.tracer_cpu_ns = thread_cpu_ns() - cpu0;
  s.tracer_syscalls = sys::counters().total() - before.total();
  s.tracer_stops = session.stats().stops;
  s.hits = m.floor() ? floor_hits : session.stats().hits;
  for (const auto& site : p.space().sites()) {
    if (site->label() == kSpareSitesSymbol) s.spare_hits += site->hits;
  }
  if (end == RunEnd::Interrupted) throw Error("interrupted");
  check_exit(p);
}

}  // namespace

// Linux 5.14's MADV_POPULATE_WRITE; Debian 12's headers predate it.
constexpr long kMadvPopulateWrite = 23;

void populate_jump_areas(TracedProcess& p) {
  std::string area = std::string("/memfd:") + jump::kAreaName;
  std::string calls = std::string("/memfd:") + jump::kCallBufferName;
  for (const Mapping& m : read_maps(p.proc_tid())) {
    // The trampolines' pages are read-execute in the tracee, and read by instruction fetch only.
    if (!m.write || (m.path.rfind(area, 0) != 0 && m.path.rfind(calls, 0) != 0)) continue;
    p.calls().syscall(SYS_madvise,
                      {static_cast<long>(m.start.value()), static_cast<long>(m.end - m.start),
                       kMadvPopulateWrite, 0, 0, 0});
  }
}

Sample run_once(const Mechanism& m, const RunConfig& cfg) {
  Sample s;
  s.iterations = cfg.iterations ? cfg.iterations : m.default_iterations;
  s.threads = cfg.threads;
  CaptureFile out;
  LaunchSpec spec;
  spec.argv = inferior_argv(m, cfg, s.iterations);
  spec.stdout_fd = out.fd();
  spec.cpu = cfg.cpus.tracee_cpu;
  if (m.uprobe()) {
    run_uprobe(m, spec, cfg, s);
  } else if (m.traced()) {
    run_traced(m, spec, cfg, s);
  } else {
    run_untraced(spec, s);
  }
  if (!s.skipped.empty()) return s;  // the machine or the process refused the mechanism
  fill_from_report(out.contents(), m, s);
  double events = static_cast<double>(s.iterations) * s.threads;
  s.cpu_ns_per_iter = (s.tracee_cpu_ns + s.tracer_cpu_ns) / events;
  std::uint64_t expected = s.iterations * s.threads;
  if (m.probing() && s.hits != expected && s.problem.empty()) {
    s.problem = "counted " + std::to_string(s.hits) + " hits, expected " + std::to_string(expected);
  }
  for (std::size_t h = 0; h < s.handler_hits.size() && s.problem.empty(); ++h) {
    if (s.handler_hits[h] != expected) {
      s.problem = "handler " + std::to_string(h + 1) + " counted " +
                  std::to_string(s.handler_hits[h]) + " hits, expected " + std::to_string(expected);
    }
  }
  if (s.spare_hits != 0 && s.problem.empty()) {
    s.problem = std::to_string(s.spare_hits) + " hits on spare sites nothing calls";
  }
  if (s.site_calls != expected && s.problem.empty()) {
    s.problem = "the inferior made " + std::to_string(s.site_calls) + " site calls, expected " +
                std::to_string(expected);
  }
  return s;
}

}  // namespace probecost
