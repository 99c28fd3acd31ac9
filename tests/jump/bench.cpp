// probecost-jump-bench: what a jump-patched probe costs per call, in-process, next to the static
// marker, on the inferior's probe site shape (inferior/sites.cpp: a non-inlined call that counts
// itself in a thread-local); and what a call probe (`probecost record`: an entry and a return
// record) costs a 5-instruction function (call_shapes.S: shape_five), with a reader thread
// draining the call buffer meanwhile, as record's does. Pinned to CPU 0 (the reader on CPU 1),
// or with --unpinned nothing pinned, as users run it; each figure is the median of several runs,
// the variants interleaved run by run so that drift spreads over all of them. Time is the
// calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), as probecost compare's CPU column.
//
//   probecost-jump-bench [CALLS [RUNS]] [--unpinned]    (default 10000000 calls, 7 runs)
#include <sched.h>
#include <sys/rseq.h>
#include <sys/sysinfo.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "inferior/marker.hpp"
#include "inferior/sites.hpp"
#include "self_patch.hpp"

extern "C" std::int64_t shape_five(std::int64_t, std::int64_t, std::int64_t);
extern "C" std::int64_t shape_five_plain(std::int64_t, std::int64_t, std::int64_t);

using namespace probecost;
using namespace probecost::selftest;

namespace {

using SiteFn = void (*)(std::uint64_t);
using FiveFn = std::int64_t (*)(std::int64_t, std::int64_t, std::int64_t);

// Timed in this thread's CPU time: on a machine shared with other work, time spent preempted
// would otherwise be charged to whichever variant was running.
template <typename Loop>
double timed(std::uint64_t calls, Loop loop) {
  double t0 = probecost::thread_cpu_ns();
  loop();
  return (probecost::thread_cpu_ns() - t0) / static_cast<double>(calls);
}

std::function<double(std::uint64_t)> site_loop(SiteFn fn) {
  return [fn](std::uint64_t calls) {
    SiteFn volatile f = fn;  // an indirect call the compiler cannot see through
    SiteFn g = f;
    return timed(calls, [&] {
      for (std::uint64_t i = 0; i < calls; ++i) g(i);
    });
  };
}

// About 200 ns of the program's own work between two calls: 128 dependent multiply-adds.
__attribute__((noinline)) std::uint64_t work(std::uint64_t x) {
  for (int i = 0; i < 128; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    asm volatile("" : "+r"(x));
  }
  return x;
}

// The 5-instruction function in a tight loop, or called amid the program's work.
std::function<double(std::uint64_t)> five_loop(FiveFn fn, bool amid_work) {
  return [fn, amid_work](std::uint64_t calls) {
    FiveFn volatile f = fn;
    FiveFn g = f;
    std::int64_t sum = 0;
    std::uint64_t x = 1;
    double ns = timed(calls, [&] {
      for (std::uint64_t i = 0; i < calls; ++i) {
        sum += g(static_cast<std::int64_t>(i), 3, 5);
        if (amid_work) x = work(x);
      }
    });
    asm volatile("" ::"r"(sum), "r"(x));
    return ns;
  };
}

struct Variant {
  Variant(std::string n, std::function<double(std::uint64_t)> r, std::function<void()> b,
          std::function<void()> a, std::size_t base_of = 0, std::uint64_t calls_of = 0)
      : name(std::move(n)),
        run(std::move(r)),
        before(std::move(b)),
        after(std::move(a)),
        base(base_of),
        calls(calls_of) {}
  std::string name;
  std::function<double(std::uint64_t)> run;  // ns per call
  std::function<void()> before, after;
  std::size_t base = 0;     // the variant whose median it adds to
  std::uint64_t calls = 0;  // per run, when not the default
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
    auto placed = area->writer().add_site(*plan, site_options(1, events, save), why);
    if (!placed) throw Error("cannot place: " + why);
    site = std::make_unique<PatchSite>(SelfMemory::instance(), placed->patch);
  }
  std::unique_ptr<LocalArea> area;
  std::unique_ptr<PatchSite> site;
};

// Buffers of `capacity` bytes per CPU in 16 sub-buffers.
jump::CallBufferConfig call_buffer_config(int args, std::uint64_t capacity) {
  jump::CallBufferConfig c;
  c.cpus = static_cast<std::uint32_t>(get_nprocs_conf());
  c.args = args;
  c.max_ids = 1;
  c.capacity = capacity;
  return c;
}

// shape_five with an entry and an exit patch writing call records, and a thread that drains the
// buffer while it runs (every millisecond, as long as the calls go on). A record the reader has
// no room for is dropped, and counted: in a tight loop the writer outruns any reader (a dropped
// record costs ~2 ns, so the figure is then an average of both).
struct CallProbe {
  CallProbe(int args, int reader_cpu, std::uint64_t capacity)
      : buffer(call_buffer_config(args, capacity)),
        area(address_of("shape_five"), jump::AreaConfig{}),
        patch(patch_calls("shape_five", 0, area, buffer)),
        reader(buffer.view(), buffer.layout(), __rdtsc(),
               {.flush_ticks = 1'000'000'000, .commit_slack = 100'000'000}),
        reader_cpu(reader_cpu) {}
  void start() {
    patch->install();
    stop = false;
    consumer = std::thread([this] { drain(); });
  }
  void finish() {
    patch->remove();
    stop = true;
    consumer.join();
    take(true);  // the next run starts with an empty buffer
  }
  void drain() {
    if (reader_cpu >= 0) {
      cpu_set_t cpus;
      CPU_ZERO(&cpus);
      CPU_SET(reader_cpu, &cpus);
      sched_setaffinity(0, sizeof cpus, &cpus);
    }
    double t0 = probecost::thread_cpu_ns();
    while (!stop) {
      take(false);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    reader_ns += probecost::thread_cpu_ns() - t0;
  }
  // What the writers have finished (with `final`, everything: they are done).
  void take(bool final) {
    reader.poll(__rdtsc(), final);
    reader.take(out);
    records += out.size();
    out.clear();
    lost = reader.lost_total();
  }
  LocalCallBuffer buffer;
  LocalArea area;
  std::unique_ptr<CallPatch> patch;
  jump::CallReader reader;
  std::vector<jump::CallRecord> out;
  int reader_cpu;
  std::thread consumer;
  std::atomic<bool> stop{false};
  std::uint64_t records = 0, lost = 0;
  double reader_ns = 0;  // the reader thread's CPU time
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void pin(int cpu) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(cpu, &cpus);
  if (sched_setaffinity(0, sizeof cpus, &cpus) != 0) std::perror("sched_setaffinity (unpinned)");
}

}  // namespace

int main(int argc, char** argv) {
  bool unpinned = false;
  std::vector<const char*> numbers;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--unpinned") == 0) {
      unpinned = true;
    } else {
      numbers.push_back(argv[i]);
    }
  }
  std::uint64_t calls = numbers.size() > 0 ? std::strtoull(numbers[0], nullptr, 10) : 10'000'000;
  int runs = numbers.size() > 1 ? std::atoi(numbers[1]) : 7;
  if (!unpinned) pin(0);
  marker::thread_init();  // the default 2^16-record ring, pre-faulted, like the inferior's

  std::vector<std::unique_ptr<JumpProbe>> probes;
  auto patched = [&](bool events, FlagSave save, bool per_cpu = false) {
    probes.push_back(std::make_unique<JumpProbe>(events, save, per_cpu));
    PatchSite* s = probes.back()->site.get();
    return std::pair<std::function<void()>, std::function<void()>>{[s] { s->install(); },
                                                                   [s] { s->remove(); }};
  };
  auto none = [] {};
  auto probe = site_loop(probecost_site_probe);
  std::vector<Variant> variants;
  variants.emplace_back("untouched", site_loop(probecost_site_plain), none, none);
  // What probecost installs keeps the flags with lahf/sahf; "no flags" is the difference.
  auto [c0, c1] = patched(false, FlagSave::None);
  variants.emplace_back("jump, count, no flags", probe, c0, c1);
  auto [f0, f1] = patched(false, FlagSave::Lahf);
  variants.emplace_back("jump, count", probe, f0, f1);
  auto [p0, p1] = patched(false, FlagSave::Pushfq);
  variants.emplace_back("jump, count, flags pushfq", probe, p0, p1);
  auto [r0, r1] = patched(false, FlagSave::None, true);
  variants.emplace_back("jump, per CPU, no flags", probe, r0, r1);
  auto [q0, q1] = patched(false, FlagSave::Lahf, true);
  variants.emplace_back("jump, count per CPU (rseq)", probe, q0, q1);
  auto [e0, e1] = patched(true, FlagSave::None);
  variants.emplace_back("jump, events, no flags", probe, e0, e1);
  auto [g0, g1] = patched(true, FlagSave::Lahf);
  variants.emplace_back("jump, events", probe, g0, g1);
  variants.emplace_back(
      "static marker", site_loop(probecost_site_marker), [] { marker::set_enabled(true); },
      [] { marker::set_enabled(false); });
  // A call probe on a 5-instruction function, called amid ~200 ns of other work (as a program
  // does: the reader keeps up) and in a tight loop; each against the same loop on the same code
  // unpatched.
  std::vector<std::unique_ptr<CallProbe>> call_probes;
  const std::uint64_t call_calls = std::max<std::uint64_t>(calls / 10, 1);
  for (bool amid_work : {true, false}) {
    std::size_t base = variants.size();
    std::string how = amid_work ? " amid work" : ", tight loop";
    variants.emplace_back("5-insn function" + how, five_loop(shape_five_plain, amid_work), none,
                          none, base, call_calls);
    for (int args : {0, 2}) {
      // Amid work, 16 MiB per CPU (`record --buffer-size 16M`): room for the reader thread to
      // be held off its CPU a while on a busy machine. The tight loop, record's default 4 MiB.
      std::uint64_t capacity = amid_work ? 16 << 20 : 4 << 20;
      call_probes.push_back(std::make_unique<CallProbe>(args, unpinned ? -1 : 1, capacity));
      CallProbe* cp = call_probes.back().get();
      variants.emplace_back(
          "calls" + how + (args ? ", 2 args" : ""), five_loop(shape_five, amid_work),
          [cp] { cp->start(); }, [cp] { cp->finish(); }, base, call_calls);
    }
  }

  for (auto& v : variants) {  // warm-up: page faults, caches, branch predictors
    v.before();
    v.run((v.calls ? v.calls : calls) / 10);
    v.after();
  }
  for (int r = 0; r < runs; ++r) {
    for (auto& v : variants) {
      v.before();
      v.samples.push_back(v.run(v.calls ? v.calls : calls));
      v.after();
    }
  }
  std::printf("probecost-jump-bench: %llu calls x %d runs, %s, thread CPU ns per call\n",
              static_cast<unsigned long long>(calls), runs,
              unpinned ? "nothing pinned" : "CPU 0 (call buffer reader on CPU 1)");
  std::printf("%-34s %8s %8s %8s %12s\n", "variant", "median", "min", "max", "added");
  for (const auto& v : variants) {
    double m = median(v.samples);
    auto [lo, hi] = std::minmax_element(v.samples.begin(), v.samples.end());
    std::printf("%-34s %8.2f %8.2f %8.2f %12.2f\n", v.name.c_str(), m, *lo, *hi,
                m - median(variants[v.base].samples));
  }
  std::printf(
      "hits: count %llu, per CPU %llu, events %llu (each %llu calls per run, %d runs + warm-up)\n",
      static_cast<unsigned long long>(probes[1]->area->writer().hits(0)),
      static_cast<unsigned long long>(probes[4]->area->writer().hits(0)),
      static_cast<unsigned long long>(probes[6]->area->writer().hits(0)),
      static_cast<unsigned long long>(calls), runs);
  const char* which[] = {"amid work", "amid work, 2 args", "tight loop", "tight loop, 2 args"};
  for (std::size_t i = 0; i < call_probes.size(); ++i) {
    const auto& cp = call_probes[i];
    std::uint64_t all = cp->records + cp->lost;
    std::printf("call records, %s: %llu read, %llu lost (%.1f%%); reader %.1f ns CPU per record\n",
                which[i], static_cast<unsigned long long>(cp->records),
                static_cast<unsigned long long>(cp->lost),
                all ? 100.0 * static_cast<double>(cp->lost) / static_cast<double>(all) : 0.0,
                cp->records ? cp->reader_ns / static_cast<double>(cp->records) : 0.0);
  }
  return 0;
}
