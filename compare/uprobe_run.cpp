// One run of the inferior under the kernel's uprobe, counted by perf events.
//
// How the counters are attached, and why this way. A perf event bound to a task counts only
// that task's hits, and `inherit` cannot carry a uprobe-PMU event to new threads: the kernel
// builds each inherited event again from attr.config1, the *path pointer*, read in the address
// space of the process calling clone (perf_uprobe_init's strndup_user), where our pointer means
// nothing, so the inferior's pthread_create fails with EFAULT. So the inferior is started
// untraced with --stop-before-loop: it creates all its threads, stops itself (SIGSTOP) at its
// start line, and we open one event per thread (and per handler), then SIGCONT it. No ptrace:
// the kernel does all the work on the hit path, and the process runs as any user's would.
// Each event is a uprobe consumer of its own, so a hit runs every event's handler; those of
// other threads find no active event of theirs on this CPU and return at once.
#include "compare/uprobe_run.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "common/error.hpp"
#include "compare/child.hpp"
#include "tracer/core/session.hpp"
#include "tracer/os/memory.hpp"
#include "tracer/os/proc_files.hpp"

namespace probecost {

namespace {

// Enough descriptors for a thousand spare probes.
void raise_fd_limit() {
  rlimit r;
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

std::string describe_site(pid_t pid, const UprobeTarget& t) {
  std::array<std::uint8_t, 15> bytes{};
  ProcMemory(pid).read(t.address, bytes);
  UprobeHandling h = uprobe_handling(bytes, t.address);
  return "kernel uprobe on '" + h.instruction + "': " + h.how;
}

}  // namespace

void run_uprobe(const Mechanism& m, LaunchSpec spec, const RunConfig& cfg, Sample& s) {
  UprobePmu pmu = uprobe_pmu();
  if (pmu.type < 0) {
    s.skipped = pmu.unavailable;
    return;
  }
  spec.argv.push_back("--stop-before-loop");
  Child child(spawn(spec));
  child.wait_for_stop();
  UprobeTarget site = locate_uprobe_target(child.pid(), m.probe_symbol);
  s.step_over_plan = describe_site(child.pid(), site);

  UprobeCounters counters;
  unsigned handlers = std::max(1u, cfg.handlers);
  std::vector<std::vector<int>> by_handler(handlers);
  for (pid_t tid : task_ids(child.pid())) {  // stopped: none comes or goes
    for (auto& fds : by_handler) {
      int fd = counters.open(pmu.type, site.path, site.offset, tid);
      if (fd < 0) {
        s.skipped = uprobe_refusal(-fd);
        return;  // ~Child kills the inferior
      }
      fds.push_back(fd);
    }
  }
  child.resume_to_end();

  for (const auto& fds : by_handler) {
    std::uint64_t total = 0;
    for (int fd : fds) total += UprobeCounters::read(fd);
    s.handler_hits.push_back(total);
  }
  s.hits = s.handler_hits.front();
}

// Removing a uprobe perf event waits for RCU-tasks-trace and SRCU grace periods, one removal
// at a time (tens of ms each in a VM): a thousand per run would take longer than the runs.
// So the spares are system-wide events (pid -1, CPU 0), opened once for all the runs that want
// them: the kernel installs them into every process that maps the file, as bpftrace's
// `uprobe:FILE:SYMBOL` does without -p. Nothing calls the spare sites, so they never count.
SpareUprobes::SpareUprobes(const std::string& inferior, unsigned count) {
  UprobePmu pmu = uprobe_pmu();
  if (pmu.type < 0) {
    skipped_ = pmu.unavailable;
    return;
  }
  LaunchSpec spec;
  spec.argv = {inferior, "--site", "plain", "--iterations", "1", "--stop-before-loop"};
  UprobeTarget base;
  {
    Child child(spawn(spec));
    child.wait_for_stop();
    base = locate_uprobe_target(child.pid(), kSpareSitesSymbol);
  }
  raise_fd_limit();
  for (unsigned i = 0; i < count && (i + 1) * kSpareSiteBytes <= base.size; ++i) {
    path_ = base.path;
    int fd = counters_.open(pmu.type, path_, base.offset + i * kSpareSiteBytes, -1, 0);
    if (fd < 0) {
      skipped_ = uprobe_refusal(-fd);
      return;
    }
  }
}

SpareUprobes::~SpareUprobes() = default;

}  // namespace probecost
