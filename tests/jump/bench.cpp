// probecost-jump-bench: what a jump-patched probe costs per call, in-process, next to the static
// marker, on the inferior's probe site shape (inferior/sites.cpp: a non-inlined call that counts
// itself in a thread-local). Pinned to CPU 0; each figure is the median of several runs, the
// variants interleaved run by run so that drift spreads over all of them. Time is the thread's CPU
// time (CLOCK_THREAD_CPUTIME_ID), as probecost compare's CPU column.
//
//   probecost-jump-bench [CALLS [RUNS]]     (default 10000000 calls, 7 runs)
#include <sched.h>
#include <sys/rseq.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "inferior/marker.hpp"
#include "inferior/sites.hpp"
#include "self_patch.hpp"

using namespace probecost;
using namespace probecost::selftest;

namespace {

using SiteFn = void (*)(std::uint64_t);

// Timed in this thread's CPU time: on a machine shared with other work, time spent preempted
// would otherwise be charged to whichever variant was running.
double ns_per_call(SiteFn fn, std::uint64_t calls) {
  SiteFn volatile f = fn;  // an indirect call the compiler cannot see through
  SiteFn g = f;
  double t0 = probecost::thread_cpu_ns();
  for (std::uint64_t i = 0; i < calls; ++i) g(i);
  return (probecost::thread_cpu_ns() - t0) / static_cast<double>(calls);
}

struct Variant {
  std::string name;
  SiteFn fn;
  std::function<void()> before, after;
  std::vector<double> samples;
};

// probecost_site_probe patched with a trampoline that counts (and records, with `events`),
// keeping the status flags as `save` says (FlagSave::None: what they cost, by difference).
struct JumpProbe {
  JumpProbe(bool events, FlagSave save, bool per_cpu = false) {
    Function f = function_named("probecost_site_probe");
    std::string why;
    auto plan = plan_jump(f.start, f.code, f.start, why);
    if (!plan) throw Error("cannot plan probecost_site_probe: " + why);
    jump::AreaConfig config{1, 4096, 1, 1 << 16};
    if (per_cpu) {
      if (__rseq_size < 20) throw Error("no rseq registration: no per-CPU counting");
      config.cpus = static_cast<std::uint32_t>(get_nprocs_conf());
      config.rseq_offset = static_cast<std::int32_t>(__rseq_offset);
    }
    area = std::make_unique<LocalArea>(f.start, config);
    auto placed = area->writer().add_site(*plan, {1, events, save}, why);
    if (!placed) throw Error("cannot place: " + why);
    site = std::make_unique<PatchSite>(SelfMemory::instance(), placed->patch);
  }
  std::unique_ptr<LocalArea> area;
  std::unique_ptr<PatchSite> site;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t calls = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10'000'000;
  int runs = argc > 2 ? std::atoi(argv[2]) : 7;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(0, &cpus);
  if (sched_setaffinity(0, sizeof cpus, &cpus) != 0) std::perror("sched_setaffinity (unpinned)");
  marker::thread_init();  // the default 2^16-record ring, pre-faulted, like the inferior's

  std::vector<std::unique_ptr<JumpProbe>> probes;
  auto patched = [&](bool events, FlagSave save, bool per_cpu = false) {
    probes.push_back(std::make_unique<JumpProbe>(events, save, per_cpu));
    PatchSite* s = probes.back()->site.get();
    return std::pair<std::function<void()>, std::function<void()>>{[s] { s->install(); },
                                                                   [s] { s->remove(); }};
  };
  auto none = [] {};
  std::vector<Variant> variants;
  variants.push_back({"untouched", probecost_site_plain, none, none, {}});
  // What probecost installs keeps the flags with lahf/sahf; "no flags" is the difference.
  auto [c0, c1] = patched(false, FlagSave::None);
  variants.push_back({"jump, count, no flags", probecost_site_probe, c0, c1, {}});
  auto [f0, f1] = patched(false, FlagSave::Lahf);
  variants.push_back({"jump, count", probecost_site_probe, f0, f1, {}});
  auto [p0, p1] = patched(false, FlagSave::Pushfq);
  variants.push_back({"jump, count, flags pushfq", probecost_site_probe, p0, p1, {}});
  auto [r0, r1] = patched(false, FlagSave::None, true);
  variants.push_back({"jump, per CPU, no flags", probecost_site_probe, r0, r1, {}});
  auto [q0, q1] = patched(false, FlagSave::Lahf, true);
  variants.push_back({"jump, count per CPU (rseq)", probecost_site_probe, q0, q1, {}});
  auto [e0, e1] = patched(true, FlagSave::None);
  variants.push_back({"jump, events, no flags", probecost_site_probe, e0, e1, {}});
  auto [g0, g1] = patched(true, FlagSave::Lahf);
  variants.push_back({"jump, events", probecost_site_probe, g0, g1, {}});
  variants.push_back({"static marker",
                      probecost_site_marker,
                      [] { marker::set_enabled(true); },
                      [] { marker::set_enabled(false); },
                      {}});

  for (auto& v : variants) {  // warm-up: page faults, caches, branch predictors
    v.before();
    ns_per_call(v.fn, calls / 10);
    v.after();
  }
  for (int r = 0; r < runs; ++r) {
    for (auto& v : variants) {
      v.before();
      v.samples.push_back(ns_per_call(v.fn, calls));
      v.after();
    }
  }
  double base = median(variants[0].samples);
  std::printf("probecost-jump-bench: %llu calls x %d runs, CPU 0, thread CPU ns per call\n",
              static_cast<unsigned long long>(calls), runs);
  std::printf("%-30s %8s %8s %8s %12s\n", "variant", "median", "min", "max", "added");
  for (const auto& v : variants) {
    double m = median(v.samples);
    auto [lo, hi] = std::minmax_element(v.samples.begin(), v.samples.end());
    std::printf("%-30s %8.2f %8.2f %8.2f %12.2f\n", v.name.c_str(), m, *lo, *hi, m - base);
  }
  std::printf(
      "hits: count %llu, per CPU %llu, events %llu (each %llu calls per run, %d runs + warm-up)\n",
      static_cast<unsigned long long>(probes[1]->area->writer().hits(0)),
      static_cast<unsigned long long>(probes[4]->area->writer().hits(0)),
      static_cast<unsigned long long>(probes[6]->area->writer().hits(0)),
      static_cast<unsigned long long>(calls), runs);
  return 0;
}
