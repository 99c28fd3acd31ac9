// Issue 23, item 3: one process traced and recorded again and again. Each iteration is a
// `probecost trace -p --via jump`, one `--via int3 --step-over outline` (its scratch page, harm4)
// and a `probecost record -p` of probe_fn, each to
// the end of a round of calls and a SIGINT; the target's resident memory and mapping count are
// printed every 10 iterations, and must come back to where they were (the README's bound).
// memory-busy: the same on a process whose threads call probe_fn without pause, each run for
// --duration 0.2, so that detaches find threads inside the trampolines
// (tracer/core/process_run_out.cpp).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "cycles.hpp"
#include "traced.hpp"

namespace fault {

namespace {

// The README's bound on what a detach may leave: no mapping, 1 MiB of resident memory (the
// program's own stack and heap pages touched meanwhile).
constexpr std::uint64_t kRssBoundKiB = 1024;

struct Footprint {
  std::size_t maps = 0, ours = 0;  // ours: mappings of a probecost memfd
  std::uint64_t rss_kib = 0;
  std::set<std::string> lines;  // /proc/PID/maps, to name what a harm left
};

Footprint footprint(pid_t pid) {
  Footprint f;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    ++f.maps;
    f.ours += line.find("/memfd:probecost-") != std::string::npos;
    f.lines.insert(line);
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) f.rss_kib = std::stoull(line.substr(6));
  }
  return f;
}

bool round_of_calls(AttachedTarget& t, const Config& cfg, Outcome& o) {
  t.send("go 20");
  if (t.wait_line("done", after(cfg.bound))) return true;
  o.harm("no answer to a round of calls");
  return false;
}

// `way`: "jump", or an int3 step-over strategy ("outline" maps scratch pages).
void trace_once(const Config& cfg, AttachedTarget& t, Outcome& o, const std::string& way) {
  TraceRun run(cfg, trace_args(way, {"-p", std::to_string(t.pid), "-b", kProbe}));
  if (!run.wait_tracing(after(cfg.start_bound))) {
    o.lose("trace never started: " + last_line(run.stderr_text()));
    return;
  }
  if (!round_of_calls(t, cfg, o)) return;
  run.signal(SIGINT);
  run.finish(after(cfg.bound), o, "after SIGINT");
}

void record_once(const Config& cfg, AttachedTarget& t, Outcome& o) {
  char path[] = "/tmp/fault-record-XXXXXX.json";
  int fd = ::mkstemps(path, 5);
  if (fd >= 0) ::close(fd);
  Pipe err;
  SpawnFds fds;
  fds.err = err.write;
  Child rec({cfg.probecost, "record", "-p", std::to_string(t.pid), "-b", kProbe, "-o", path}, fds);
  err.close_write();
  LineReader lines(err.read);
  bool tracing = false;
  while (!tracing) {
    auto line = lines.next(after(cfg.bound));
    if (!line) break;
    tracing = line->find("tracing process") != std::string::npos;
  }
  if (!tracing) {
    o.lose("record never started: " + last_line(lines.seen()));
  } else if (round_of_calls(t, cfg, o)) {
    rec.signal(SIGINT);
    auto status = rec.wait(after(cfg.bound));
    while (lines.next(after(0.05))) {
    }
    if (!status) {
      o.hang("record still running after SIGINT");
    } else if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
      o.lose("record " + describe_status(*status) + ": " + last_line(lines.seen()));
    } else if (lines.seen().find("kept the") != std::string::npos) {
      o.harm("record kept a mapping: " + last_line(lines.seen()));
    }
  }
  ::unlink(path);
}

// The harm, with the mappings that came and went: "left 54 mappings ... +ADDR r-xp ...".
void judge(const Footprint& before, const Footprint& now, Outcome& o) {
  if (now.maps == before.maps && now.ours == 0 && now.rss_kib <= before.rss_kib + kRssBoundKiB)
    return;
  std::string why = "left " + std::to_string(now.maps) + " mappings (" + std::to_string(now.ours) +
                    " of probecost) and " + std::to_string(now.rss_kib) + " KiB resident, from " +
                    std::to_string(before.maps) + " and " + std::to_string(before.rss_kib) + " KiB";
  for (const auto& l : now.lines)
    if (!before.lines.count(l)) why += "\n    + " + l;
  for (const auto& l : before.lines)
    if (!now.lines.count(l)) why += "\n    - " + l;
  o.harm(why);
}

void print(int iteration, const Footprint& f) {
  std::printf("  memory-cycles: after %3d: %zu mappings (%zu of probecost), %llu KiB resident\n",
              iteration, f.maps, f.ours, static_cast<unsigned long long>(f.rss_kib));
  std::fflush(stdout);
}

// One `probecost ARGS... -p PID -b probe_fn --duration SECONDS` of the busy target, to its
// end. Returns true when it said it kept a mapping.
bool busy_run_once(const Config& cfg, pid_t pid, std::vector<std::string> args, const char* seconds,
                   Outcome& o) {
  args.insert(args.begin(), cfg.probecost);
  std::vector<std::string> more = {"-p", std::to_string(pid), "-b", kProbe, "--duration", seconds};
  args.insert(args.end(), more.begin(), more.end());
  Pipe err;
  SpawnFds fds;
  fds.err = err.write;
  Child run(args, fds);
  err.close_write();
  LineReader lines(err.read);
  while (lines.next(after(3 * cfg.bound))) {
  }
  auto status = run.wait(after(cfg.bound));
  if (!status) {
    o.hang(args[1] + " still running after its --duration");
    run.kill();
  } else if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    o.lose(args[1] + " " + describe_status(*status) + ": " + last_line(lines.seen()));
  }
  return lines.seen().find("kept the") != std::string::npos;
}

}  // namespace

Outcome memory_busy_cycle(const Config& cfg, const Cycle&, int threads, int iterations,
                          bool stacks) {
  Outcome o;
  o.faults = 0;
  auto t = start_target(cfg, {"fault_busy", "--threads", std::to_string(threads)});
  const Footprint before = footprint(t->pid);
  std::printf("  memory-busy (%d threads): before: %zu mappings, %llu KiB resident\n", threads,
              before.maps, static_cast<unsigned long long>(before.rss_kib));
  Footprint now = before;
  int kept = 0;
  char path[] = "/tmp/fault-record-XXXXXX.json";
  int fd = ::mkstemps(path, 5);
  if (fd >= 0) ::close(fd);
  for (int i = 1; i <= iterations && o.clean(); ++i) {
    std::vector<std::string> trace = {"trace", "--via", "jump"}, record = {"record", "-o", path};
    if (stacks) trace.push_back("--stacks"), record.push_back("--stacks");
    kept += busy_run_once(cfg, t->pid, trace, "0.2", o);
    // 0.01 s: 3 threads calling without pause make ~1.4 million records in 0.2 s, whose trace
    // the sanitizer build took 75 to 136 s to write (4 s in Release; 19 s for 0.01 s); the
    // detach is what is tested here, and threads are inside the trampolines at any moment.
    kept += busy_run_once(cfg, t->pid, record, "0.01", o);
    o.faults += 2;
    now = footprint(t->pid);
    if (i % 5 == 0 || i == iterations) {
      std::printf(
          "  memory-busy (%d threads): after %3d: %zu mappings (%zu of probecost), %llu "
          "KiB resident, %d detaches kept a mapping\n",
          threads, i, now.maps, now.ours, static_cast<unsigned long long>(now.rss_kib), kept);
      std::fflush(stdout);
    }
  }
  ::unlink(path);
  judge(before, now, o);
  if (kept) o.harm(std::to_string(kept) + " detaches kept a mapping");
  auto end = stop_and_check(*t, cfg, o);
  // Every call the loops made reached probe_fn once: none lost or run twice by a thread
  // brought out of a trampoline.
  o.count_checked = end.has_value();
  if (end && (*end)["calls"] != (*end)["loops"])
    o.miscount("probe_fn counted " + (*end)["calls"] + " calls, its callers made " +
               (*end)["loops"]);
  if (end) {
    std::printf("  memory-busy (%d threads): the program's calls=%s loops=%s bad=%s\n", threads,
                (*end)["calls"].c_str(), (*end)["loops"].c_str(), (*end)["bad"].c_str());
    std::fflush(stdout);
  }
  return o;
}

Outcome memory_cycle(const Config& cfg, const Cycle&, int iterations,
                     const std::vector<std::string>& ways, bool with_record) {
  Outcome o;
  o.faults = 0;
  auto t = start_target(cfg, {"fault_busy", "--idle", "--threads", "2"});
  if (!round_of_calls(*t, cfg, o)) return o;
  const Footprint before = footprint(t->pid);
  print(0, before);
  Footprint now = before;
  for (int i = 1; i <= iterations && o.clean(); ++i) {
    for (const auto& way : ways) trace_once(cfg, *t, o, way);
    if (with_record) record_once(cfg, *t, o);
    o.faults += static_cast<int>(ways.size()) + with_record;
    now = footprint(t->pid);
    if (i % 10 == 0 || i == iterations) print(i, now);
  }
  judge(before, now, o);
  stop_and_check(*t, cfg, o);
  return o;
}

}  // namespace fault
