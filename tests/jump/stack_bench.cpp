// probecost-stack-bench (issue 26): what a stack snapshot costs, in-process.
//
// 1. The tracee's side: a function reached through 8 frames of ~200 bytes, called in a tight
//    loop, untouched, with trace's counting jump probe, and with a snapshot-taking probe of 1,
//    4, 8 and 16 KiB (the loop runs under 64 KiB of its caller's stack, so that each copy is
//    whole). Each snapshot's ring holds 128 MiB, more than a run writes, and a reader thread
//    frees the sub-buffers as they fill and does nothing else: the figure is the copy's (into
//    memory colder than the caches, as a ring is), not the unwinder's. Thread CPU ns and TSC ticks
//    per call, the median, min and max of RUNS runs, the variants interleaved run by run; a run
//    whose writer found no room (a record dropped) is said.
// 2. The reader's side: SnapshotUnwinder (libdw) over 16 KiB snapshots of stacks 10 and 34
//    frames deep, each unwound again and again: the CPU per stack once the modules' CFI is
//    parsed (the first unwind, which parses it, is printed apart).
//
//   probecost-stack-bench [CALLS [RUNS]]        (default 4000 calls, 15 runs; pinned to CPU 0,
//                                                the reader on CPU 1)
#include <alloca.h>
#include <pthread.h>
#include <sched.h>
#include <sys/sysinfo.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "breakpoint/in_tracee/stack_record.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "self_patch.hpp"
#include "tracer/symbols/stack_unwind.hpp"

using namespace probecost;
using namespace probecost::jump;
using namespace probecost::selftest;

extern "C" {
int sb_seen;  // a body long enough for the jump's 5 bytes before its ret
__attribute__((noinline)) int sb_target(int x) {
  asm volatile("" ::: "memory");
  sb_seen += x;
  return x * 3 + sb_seen;
}
// A frame of ~200 bytes the compiler keeps (written and read back).
__attribute__((noinline)) int sb_nest(int depth, int x) {
  volatile char pad[192];
  pad[0] = static_cast<char>(x);
  int r = depth ? sb_nest(depth - 1, x) : sb_target(x);
  return r + pad[0] - static_cast<char>(x);
}
}

namespace {

constexpr int kDepth = 8;
// Room for a whole run of the default calls at 16 KiB (32 KiB slots): a run never finds its
// ring full however late the reader wakes. Written through before the runs, as probecost
// makes the program write its rings at the attach: no page fault in a run.
constexpr std::uint64_t kRing = 128ull << 20;

void pin(int cpu) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(cpu, &cpus);
  sched_setaffinity(0, sizeof cpus, &cpus);
}

std::uint64_t my_tp() {
  std::uint64_t tp;
  asm("mov %%fs:0, %0" : "=r"(tp));
  return tp;
}

std::pair<std::uint64_t, std::uint64_t> my_stack() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr)) throw Error("pthread_getattr_np");
  void* at = nullptr;
  std::size_t size = 0;
  pthread_attr_getstack(&attr, &at, &size);
  pthread_attr_destroy(&attr);
  auto lo = reinterpret_cast<std::uintptr_t>(at);
  return {lo, lo + size};
}

CallBufferConfig config(std::uint32_t stack_bytes, std::uint64_t capacity) {
  CallBufferConfig c;
  c.cpus = static_cast<std::uint32_t>(get_nprocs_conf());
  c.capacity = capacity;
  c.subbuffers = 16;
  c.max_ids = 2;
  c.stack_bytes = stack_bytes;
  return c;
}

// sb_target patched with a snapshot of `stack_bytes` (or, with 0, trace's counting probe).
struct Probe {
  explicit Probe(std::uint32_t stack_bytes)
      : buffer(config(stack_bytes ? stack_bytes : 64, kRing)),
        area(address_of("sb_target"), AreaConfig{}),
        reader(buffer.view(), buffer.layout(), __rdtsc(), {}) {
    Function f = function_named("sb_target");
    std::string why;
    auto plan = plan_jump(f.start, f.code, f.start, why);
    if (!plan) throw Error("sb_target: " + why);
    auto data = buffer.view().subspan(buffer.layout().data_offset);
    std::fill(data.begin(), data.end(), std::uint8_t{0});
    SiteOptions options = site_options(1);
    if (stack_bytes) options.calls = buffer.target(1);
    auto placed = area.writer().add_site(*plan, options, why);
    if (!placed) throw Error("sb_target: " + why);
    site = std::make_unique<PatchSite>(SelfMemory::instance(), placed->patch);
    snapshots = stack_bytes != 0;
    if (!snapshots) return;
    auto [lo, hi] = my_stack();
    ThreadTable(buffer.view().subspan(buffer.layout().threads_offset, kThreadTableBytes))
        .enter(my_tp(), lo, hi);
  }
  void start() {
    site->install();
    if (!snapshots) return;
    stop = false;
    lost_before = reader.lost_total();
    drain = std::thread([this] { free_as_filled(); });
  }
  void finish() {
    site->remove();
    if (!snapshots) return;
    stop = true;
    reader.wake_reader();
    drain.join();
    reader.poll(__rdtsc(), true, [](std::uint32_t, const std::uint8_t*, std::size_t) {});
    if (reader.lost_total() > lost_before) ++runs_with_drops;
  }
  void free_as_filled() {
    pin(1);
    while (!stop) {
      std::uint32_t seen = reader.wake_word();
      auto n =
          reader.poll(__rdtsc(), false, [](std::uint32_t, const std::uint8_t*, std::size_t) {});
      if (!n && !stop) reader.wait_for_writers(seen, 1'000'000);
    }
  }
  LocalCallBuffer buffer;
  LocalArea area;
  std::unique_ptr<PatchSite> site;
  CallReader reader;
  bool snapshots = false;
  std::thread drain;
  std::atomic<bool> stop{false};
  std::uint64_t lost_before = 0;
  int runs_with_drops = 0;
};

struct Sample {
  double ns, ticks;
};

// The loop, under 64 KiB of this frame: every copy of up to 16 KiB finds its bytes.
__attribute__((noinline)) Sample run_loop(std::uint64_t calls) {
  volatile char* pad = static_cast<char*>(alloca(65536));
  pad[0] = 1;
  int sum = 0;
  double t0 = thread_cpu_ns();
  std::uint64_t c0 = __rdtsc();
  for (std::uint64_t i = 0; i < calls; ++i) sum += sb_nest(kDepth, static_cast<int>(i));
  std::uint64_t c1 = __rdtsc();
  double t1 = thread_cpu_ns();
  asm volatile("" ::"r"(sum), "r"(pad[0]));
  auto n = static_cast<double>(calls);
  return {(t1 - t0) / n, static_cast<double>(c1 - c0) / n};
}

struct Variant {
  std::string name;
  std::unique_ptr<Probe> probe;  // none: untouched
  std::vector<Sample> samples;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void print_variant(const Variant& v, double base_ns) {
  std::vector<double> ns, ticks;
  for (const auto& s : v.samples) ns.push_back(s.ns), ticks.push_back(s.ticks);
  auto [lo, hi] = std::minmax_element(ns.begin(), ns.end());
  double m = median_of(ns);
  std::printf("%-24s %9.1f %9.1f %9.1f %9.1f %9.0f", v.name.c_str(), m, *lo, *hi, m - base_ns,
              median_of(ticks));
  if (v.probe && v.probe->runs_with_drops)
    std::printf("   (%d runs dropped records: the reader fell behind)", v.probe->runs_with_drops);
  std::printf("\n");
}

void tracee_side(std::uint64_t calls, int runs) {
  std::vector<Variant> variants;
  variants.push_back({"untouched", nullptr, {}});
  variants.push_back({"jump, count", std::make_unique<Probe>(0), {}});
  for (std::uint32_t kib : {1u, 4u, 8u, 16u})
    variants.push_back({"jump + snapshot " + std::to_string(kib) + " KiB",
                        std::make_unique<Probe>(kib == 16 ? kMaxStackBytes : kib * 1024),
                        {}});
  for (auto& v : variants) {  // warm-up: page faults, caches, branch predictors
    if (v.probe) v.probe->start();
    run_loop(calls / 10);
    if (v.probe) v.probe->finish();
  }
  for (int r = 0; r < runs; ++r) {
    for (auto& v : variants) {
      if (v.probe) v.probe->start();
      v.samples.push_back(run_loop(calls));
      if (v.probe) v.probe->finish();
    }
  }
  std::printf("1. the tracee: %llu calls x %d runs through %d frames, thread CPU per call\n",
              static_cast<unsigned long long>(calls), runs, kDepth);
  std::printf("%-24s %9s %9s %9s %9s %9s\n", "variant", "median ns", "min", "max", "added ns",
              "ticks");
  std::vector<double> base;
  for (const auto& s : variants[0].samples) base.push_back(s.ns);
  for (const auto& v : variants) print_variant(v, median_of(base));
}

// `count` snapshots of sb_target `depth` frames down, copied out of the buffer.
std::vector<std::vector<std::uint8_t>> take_snapshots(int depth, int count) {
  Probe p(16384);
  p.site->install();
  int sum = 0;
  for (int i = 0; i < count; ++i) sum += sb_nest(depth, i);
  p.site->remove();
  asm volatile("" ::"r"(sum));
  std::vector<std::vector<std::uint8_t>> raw;
  std::uint32_t rs = p.buffer.layout().record_size;
  p.reader.poll(__rdtsc(), true, [&](std::uint32_t, const std::uint8_t* d, std::size_t n) {
    for (std::size_t at = 0; at + rs <= n; at += rs) raw.emplace_back(d + at, d + at + rs);
  });
  return raw;
}

void reader_side(int runs) {
  std::printf("2. the reader: SnapshotUnwinder over 16 KiB snapshots, thread CPU per stack\n");
  std::printf("%-24s %9s %9s %9s %9s %9s %9s\n", "stack", "median ns", "min", "max", "frames",
              "ns/frame", "first ns");
  for (int depth : {kDepth, 32}) {
    auto raw = take_snapshots(depth, 1000);
    if (raw.empty()) throw Error("no snapshot taken");
    SnapshotUnwinder unwinder(getpid(), 4096);
    double t0 = thread_cpu_ns();
    auto first = unwinder.unwind(decode_snapshot(raw[0]));
    double first_ns = thread_cpu_ns() - t0;
    std::vector<double> per_stack;
    std::size_t frames = first.ips.size();
    for (int r = 0; r < runs; ++r) {
      double t = thread_cpu_ns();
      for (int lap = 0; lap < 10; ++lap)
        for (const auto& rec : raw) unwinder.unwind(decode_snapshot(rec));
      per_stack.push_back((thread_cpu_ns() - t) / (10.0 * static_cast<double>(raw.size())));
    }
    auto [lo, hi] = std::minmax_element(per_stack.begin(), per_stack.end());
    double m = median_of(per_stack);
    std::printf("%-24s %9.0f %9.0f %9.0f %9zu %9.0f %9.0f%s\n",
                (std::to_string(depth + 2) + " frames deep").c_str(), m, *lo, *hi, frames,
                m / static_cast<double>(frames), first_ns, first.truncated ? " (truncated)" : "");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t calls = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4000;
  int runs = argc > 2 ? std::atoi(argv[2]) : 15;
  if (!have_rseq()) {
    std::fprintf(stderr, "probecost-stack-bench: glibc registered no rseq here\n");
    return 1;
  }
  pin(0);
  try {
    tracee_side(calls, runs);
    reader_side(runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probecost-stack-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
