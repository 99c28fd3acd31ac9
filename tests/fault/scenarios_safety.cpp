// Scenarios of issue 16 §3-§5: a seccomp filter on the calls probecost makes the target run,
// SIGKILL of probecost with int3 probes in at a known hit rate, and `probecost restore` beside
// breakpoints that are not probecost's.
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "cycles.hpp"
#include "harness.hpp"
#include "text_check.hpp"
#include "traced.hpp"

namespace fault {

namespace {

bool alive(pid_t pid) {
  return ::kill(pid, 0) == 0 && proc_state(pid) != 'Z';
}

// `probecost restore -p PID -f json`: its report, or nothing (with why in `o`) if it failed.
std::optional<nlohmann::json> run_restore(const Config& cfg, pid_t pid, Outcome& o) {
  Pipe out;
  SpawnFds fds;
  fds.out = out.write;
  Child restore({cfg.probecost, "restore", "-p", std::to_string(pid), "-f", "json"}, fds);
  out.close_write();
  LineReader lines(out.read);
  while (lines.next(after(cfg.bound))) {
  }
  auto status = restore.wait(after(cfg.bound));
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    o.restore = Outcome::Restore::Failed;
    o.harm("probecost restore failed: " + (status ? describe_status(*status) : "hung"));
    return std::nullopt;
  }
  o.restore = Outcome::Restore::Ok;
  try {
    return nlohmann::json::parse(lines.seen());
  } catch (const std::exception&) {
    o.harm("probecost restore printed no JSON");
    return std::nullopt;
  }
}

}  // namespace

// The target loads a seccomp filter that answers `filter` (CALL:ACTION, fault_busy --seccomp)
// before its threads start; probecost is attached, a known round of calls is made, SIGINT.
// probecost must fall back to what needs no such call and count every hit; the target must
// not get a SIGSYS or die. With --via jump and a filter on what a jump needs, a refusal
// (exit 1 or 2) that names the reason is right too: nothing else is left for a jump.
Outcome seccomp_cycle(const Config& cfg, const Cycle& c, const std::string& filter) {
  Outcome o;
  auto t = Traced::attach(cfg, c, {"fault_busy", "--threads", "2", "--idle", "--seccomp", filter});
  bool jump_refusable = c.strategy == "jump" && filter.rfind("rt_sigaction", 0) != 0;
  if (!t.wait_traced(after(cfg.bound + 10))) {
    if (!jump_refusable) o.lose("probecost never started tracing: " + t.run().stderr_text());
    t.run().finish(after(cfg.bound), o, "a refused --via jump", {1, 2});
    if (jump_refusable && t.run().stderr_text().find("seccomp") == std::string::npos)
      o.lose("--via jump refused without naming the seccomp filter: " + t.run().stderr_text());
    t.check_attached(cfg, o);
    return o;
  }
  t.counted_round(cfg, 100, 200, o);
  if (!o.clean()) o.why += " [filter " + filter + "]";
  return o;
}

// SIGKILL of probecost while two threads call the probed function `rate` times a second in
// all, with int3 probes (or jumps): nobody may die, see a stray trap or get a wrong result.
// Then `probecost restore` must leave the text as the files have it, and the program its own
// SIGTRAP handler. (Before probecost held its stops until resumed, tracer/core/family.hpp, a thread
// whose int3 stop it had collected was let go one byte past the int3: 11 of 90 harmed.)
Outcome sigkill_rate_cycle(const Config& cfg, const Cycle& c, int rate) {
  Outcome o;
  auto t = Traced::attach(cfg, c, {"fault_busy", "--threads", "2", "--rate", std::to_string(rate)});
  if (!t.traced_or_lost(after(cfg.bound + 10), o)) return o;
  pause_for(c.uniform(0.05, 0.3));
  t.run().kill();
  // Hits go on, untraced, through whatever probecost left (the handler, then the guardian's
  // restored bytes, or the jumps).
  pause_for(0.2);
  if (!alive(t.pid())) {
    auto status = t.attached().child.wait(after(cfg.bound));
    auto end = t.pipes().wait_line("fatal", after(0.1));
    o.harm("the target " + (status ? describe_status(*status) : std::string("died")) +
           " after probecost's SIGKILL at " + std::to_string(rate) + " hits/s" +
           (end ? " (" + *end + ")" : ""));
    return o;
  }
  run_restore(cfg, t.pid(), o);
  t.check_attached(cfg, o);
  if (!o.clean()) {
    // What the target said of it (target_common.cpp: a wrong result, a fatal signal).
    const std::string& said = t.pipes().lines.seen();
    if (auto at = said.find("fatal "); at != std::string::npos)
      o.why += " (" + said.substr(at + 6, said.find('\n', at) - at - 6) + ")";
    o.why += " [" + std::to_string(rate) + " hits/s]";
  }
  return o;
}

namespace {

// Opens a kernel uprobe counting event on `addr` in process `pid` (its main thread), as
// bpftrace's uprobe and `perf probe -x` do; -1 where the kernel refuses it.
int open_uprobe(pid_t pid, std::uint64_t addr) {
  std::ifstream type_file("/sys/bus/event_source/devices/uprobe/type");
  int type = -1;
  if (!(type_file >> type)) return -1;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    std::uint64_t start, end, offset;
    char perms[8];
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*u %n", &start,
                    &end, perms, &offset, &path_at) < 4 ||
        addr < start || addr >= end || path_at <= 0)
      continue;
    static std::string path;
    path = line.substr(static_cast<std::size_t>(path_at));
    perf_event_attr attr{};
    attr.size = sizeof attr;
    attr.type = static_cast<std::uint32_t>(type);
    attr.config1 = reinterpret_cast<std::uint64_t>(path.c_str());
    attr.config2 = addr - start + offset;
    return static_cast<int>(
        ::syscall(SYS_perf_event_open, &attr, pid, -1, -1, PERF_FLAG_FD_CLOEXEC));
  }
  return -1;
}

std::uint64_t read_count(int fd) {
  std::uint64_t n = 0;
  return ::read(fd, &n, sizeof n) == sizeof n ? n : ~0ull;
}

std::uint64_t field(const std::string& line, const std::string& key) {
  auto at = line.find(key + "=");
  return at == std::string::npos ? ~0ull
                                 : std::stoull(line.substr(at + key.size() + 1), nullptr, 0);
}

// The addresses of the bytes in which the target's text differs from its files.
std::set<std::uint64_t> differing(pid_t pid) {
  std::set<std::uint64_t> out;
  for (const auto& d : text_differences(pid, 64)) {
    auto open = d.find("(0x");
    if (open != std::string::npos) out.insert(std::stoull(d.substr(open + 1), nullptr, 16));
  }
  return out;
}

}  // namespace

// A process with its own int3 hook and a kernel uprobe (when the kernel allows one) is traced
// and probecost SIGKILLed; `probecost restore` must put back only what probecost wrote: the
// hook still returns 4242 through its int3, the uprobe still counts every call, and the text
// differs from the files at those two bytes only.
Outcome foreign_cycle(const Config& cfg, const Cycle& c) {
  Outcome o;
  auto t = Traced::attach(cfg, c, {"fault_foreign", "--threads", "2"});
  auto sites = t.pipes().wait_line("sites", after(cfg.bound));
  if (!sites) {
    o.harm("fault_foreign did not say where its sites are");
    return o;
  }
  std::uint64_t hook = field(*sites, "own_hook"), up = field(*sites, "uprobe_fn");
  int uprobe = open_uprobe(t.pid(), up);  // before probecost: its int3 is in the text first
  if (!t.traced_or_lost(after(cfg.bound + 10), o)) {
    if (uprobe >= 0) ::close(uprobe);
    return o;
  }
  t.pipes().send("go 20");
  t.pipes().wait_line("done", after(cfg.bound));
  t.run().kill();
  auto report = run_restore(cfg, t.pid(), o);
  std::set<std::uint64_t> expected = {hook};
  if (uprobe >= 0) expected.insert(up);
  if (differing(t.pid()) != expected)
    o.harm("after restore the text differs from the files elsewhere than at the foreign int3s");
  t.pipes().send("go 20");
  auto done = t.pipes().wait_line("done", after(cfg.bound));
  if (!done || field(*done, "hook") != 4242) o.harm("the program's own int3 hook was removed");
  if (uprobe >= 0) {
    std::uint64_t counted = read_count(uprobe);
    if (!done || counted != field(*done, "uprobe_calls"))
      o.harm("the kernel uprobe counted " + std::to_string(counted) + " of " +
             std::to_string(done ? field(*done, "uprobe_calls") : 0) + " calls");
    ::close(uprobe);
  }
  if (report && report->value("bytes", nlohmann::json::array()).size() < expected.size())
    o.harm("restore did not report the int3 bytes it left alone");
  t.pipes().send("stop");
  auto end = t.pipes().wait_line("end", after(cfg.bound));
  if (!end || field(*end, "bad") != 0 || field(*end, "traps") != 0)
    o.harm("fault_foreign's end: " + end.value_or("none"));
  return o;
}

}  // namespace fault
