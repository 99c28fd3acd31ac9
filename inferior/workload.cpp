// probecost-inferior: the workload `probecost compare` measures. Each of T threads calls one
// probe site N times (with optional work per iteration), timing its own loop with the TSC,
// CLOCK_MONOTONIC and its thread CPU clock, and counting its own hits. The report is one JSON
// document on stdout.
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include <x86intrin.h>

#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "inferior/marker.hpp"
#include "inferior/options.hpp"
#include "inferior/sanitizer_options.hpp"
#include "inferior/sites.hpp"
#include "inferior/variants.hpp"

namespace {

using probecost::inferior::Options;
using probecost::inferior::t_site_calls;
using probecost::inferior::usage_error;
namespace variants = probecost::inferior::variants;
using Site = void (*)(std::uint64_t);

struct ThreadResult {
  pid_t tid = 0;
  int cpu = -1;
  std::uint64_t ns = 0, cycles = 0, cpu_ns = 0;
  long minflt = 0;                         // the thread's minor page faults during its loop
  std::uint64_t start_ns = 0, end_ns = 0;  // CLOCK_MONOTONIC: all threads' loops span min..max
  std::uint64_t calls = 0, traps = 0;
  std::uint64_t marker_written = 0, marker_overwritten = 0;
  bool marker_valid = true;
  std::string marker_problem;
};

__thread std::uint64_t t_traps = 0;
void on_sigtrap(int) {
  ++t_traps;
}  // the empty handler of the 2006 test, plus a count

// kind:NAME sites: the loop calls this wrapper, which counts the call like the C sites do and
// goes on to the kind's entry in kinds.S.
Site g_kind_entry = nullptr;
void kind_site(std::uint64_t arg) {
  ++t_site_calls;
  g_kind_entry(arg);
}

std::string variant_list() {
  std::string out;
  for (auto v = variants::variant_names(); *v; ++v)
    out += std::string(out.empty() ? "" : ", ") + *v;
  return out + "; ARGS 0, 1, 3 or 6";
}

bool is_variant(const Options& o) {
  return o.site.rfind("variant:", 0) == 0;
}

std::string site_symbol(const Options& o) {
  if (is_variant(o)) return variants::find_site(o.site.substr(8))->symbol;
  if (o.site.rfind("kind:", 0) == 0) return "probecost_kind_" + o.site.substr(5);
  return "probecost_site_" + o.site;
}

Site site_by_name(const std::string& name) {
  if (name.rfind("kind:", 0) == 0) {
    g_kind_entry = probecost::inferior::kind_entry(name.c_str() + 5);
    if (!g_kind_entry) {
      std::string known;
      for (auto k = probecost::inferior::kind_names(); *k; ++k) known += std::string(" ") + *k;
      usage_error("unknown site '" + name + "' (kinds:" + known + ")");
    }
    return kind_site;
  }
  if (name.rfind("variant:", 0) == 0) {
    if (auto* v = variants::find_site(name.substr(8))) return v->fn;
    usage_error("unknown site '" + name + "' (variant:VARIANT:ARGS: " + variant_list() + ")");
  }
  if (name == "plain") return probecost_site_plain;
  if (name == "probe") return probecost_site_probe;
  if (name == "nop5") return probecost_site_nop5;
  if (name == "push") return probecost_site_push;
  if (name == "marker") return probecost_site_marker;
  if (name == "int3") return probecost_site_int3;
  usage_error("unknown site '" + name +
              "' (plain, probe, nop5, push, marker, int3, kind:NAME, variant:VARIANT:ARGS)");
}

std::uint64_t now_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

std::uint64_t tsc() {
  _mm_lfence();  // no earlier instruction still in flight when we read the counter
  std::uint64_t t = __rdtsc();
  _mm_lfence();
  return t;
}

// The loop, instantiated per work kind so the empty loop has no work branch in it.
template <bool kWork>
void loop(Site site, std::uint64_t n, std::size_t bytes, char* dst, const char* src) {
  for (std::uint64_t i = 0; i < n; ++i) {
    if constexpr (kWork) {
      std::memcpy(dst, src, bytes);
      asm volatile("" ::"r"(dst) : "memory");
    }
    site(i);
  }
}

// A variant's records: one per call, the last one of this thread's last call.
void check_variant(const Options& o, ThreadResult& r) {
  auto v = variants::view();
  const auto* site = variants::find_site(o.site.substr(8));
  r.marker_written = v.records;
  auto fail = [&](const std::string& why) {
    r.marker_valid = false;
    if (r.marker_problem.empty()) r.marker_problem = why;
  };
  if (site->variant == "none") return;  // no marker there
  if (v.records != o.iterations) fail("records != iterations");
  std::uint64_t header = (std::uint64_t(site->args) << 32) | variants::kVariantEventId;
  if (v.records && v.last_id != header) fail("wrong record header");
  if (v.records && site->args > 0 && v.last_first_arg != o.iterations - 1) {
    fail("last record's argument is not the last iteration");
  }
}

void check_marker(const Options& o, ThreadResult& r) {
  if (is_variant(o)) return check_variant(o, r);
  auto v = probecost::marker::view();
  r.marker_written = v.written;
  r.marker_overwritten = v.overwritten;
  auto fail = [&](const std::string& why) {
    r.marker_valid = false;
    if (r.marker_problem.empty()) r.marker_problem = why;
  };
  if (v.written != o.iterations) fail("written != iterations");
  std::uint64_t expect_arg = v.overwritten;  // oldest surviving record
  std::uint64_t last_tsc = 0;
  for (const auto& rec : v.records) {
    if (rec.id != probecost::inferior::kSiteEventId) fail("wrong event id");
    if (rec.arg != expect_arg++) fail("argument out of sequence");
    if (rec.tsc < last_tsc) fail("timestamp went backwards");
    last_tsc = rec.tsc;
  }
}

void pin(const Options& o, unsigned index) {
  if (o.pin_threads.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(o.pin_threads[index % o.pin_threads.size()], &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    usage_error("cannot pin thread " + std::to_string(index) + ": " + std::strerror(errno));
  }
}

// The start line: its completion runs once every thread has arrived, before any is released.
// With --stop-before-loop it stops the whole process there, so that a tool can attach to each
// thread (probecost's uprobe counters) before any loop starts; SIGCONT releases them.
struct StopFirst {
  bool on;
  void operator()() noexcept {
    if (on) ::raise(SIGSTOP);
  }
};
using StartLine = std::barrier<StopFirst>;

void run_thread(const Options& o, unsigned index, Site site, StartLine& start, ThreadResult& r) {
  r.tid = gettid();
  pin(o, index);
  // One buffer: the source page-aligned, the destination 2 KiB into a page, so that every run
  // copies with the same alignment and no store aliases a load 4 KiB away (which malloc's
  // placement would otherwise vary from run to run).
  std::size_t span = (o.work_bytes + 4095) / 4096 * 4096;
  std::vector<char> buffer(2 * span + 3 * 4096, 'x');
  char* src = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(buffer.data()) + 4095) &
                                      ~std::uintptr_t{4095});
  char* dst = src + span + 4096 + 2048;
  if (o.marker_on) {
    if (is_variant(o)) {
      variants::thread_init();
    } else {
      probecost::marker::thread_init(o.marker_capacity);
    }
  }
  start.arrive_and_wait();

  rusage u0{}, u1{};
  getrusage(RUSAGE_THREAD, &u0);
  std::uint64_t cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  std::uint64_t ns0 = now_ns(CLOCK_MONOTONIC);
  std::uint64_t c0 = tsc();
  if (o.work_bytes) {
    loop<true>(site, o.iterations, o.work_bytes, dst, src);
  } else {
    loop<false>(site, o.iterations, 0, nullptr, nullptr);
  }
  std::uint64_t c1 = tsc();
  std::uint64_t ns1 = now_ns(CLOCK_MONOTONIC);
  std::uint64_t cpu1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  getrusage(RUSAGE_THREAD, &u1);
  r.minflt = u1.ru_minflt - u0.ru_minflt;

  r.ns = ns1 - ns0;
  r.start_ns = ns0;
  r.end_ns = ns1;
  r.cycles = c1 - c0;
  r.cpu_ns = cpu1 - cpu0;
  r.calls = t_site_calls;
  r.traps = t_traps;
  r.cpu = sched_getcpu();
  if (o.marker_on) {
    check_marker(o, r);
    probecost::marker::thread_release();
    variants::thread_release();
  }
}

nlohmann::json report(const Options& o, const std::vector<ThreadResult>& results) {
  nlohmann::json threads = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json t = {{"tid", r.tid},       {"cpu", r.cpu},           {"ns", r.ns},
                        {"cycles", r.cycles}, {"cpu_ns", r.cpu_ns},     {"calls", r.calls},
                        {"traps", r.traps},   {"start_ns", r.start_ns}, {"end_ns", r.end_ns},
                        {"minflt", r.minflt}};
    if (o.marker_on) {
      t["marker"] = {{"written", r.marker_written},
                     {"overwritten", r.marker_overwritten},
                     {"valid", r.marker_valid},
                     {"problem", r.marker_problem}};
    }
    threads.push_back(t);
  }
  return {{"pid", getpid()},
          {"site", o.site},
          {"symbol", site_symbol(o)},
          {"checksum", probecost_kinds_checksum},
          {"slot", probecost_kinds_slot},
          {"marker", o.marker_on},
          {"sigtrap_handler", o.sigtrap_handler},
          {"iterations", o.iterations},
          {"threads", threads},
          {"work_bytes", o.work_bytes}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o = probecost::inferior::parse_options(argc, argv);
  Site site = site_by_name(o.site);
  if (o.sigtrap_handler) {
    struct sigaction sa = {};
    sa.sa_handler = on_sigtrap;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTRAP, &sa, nullptr);
  }
  probecost::marker::set_enabled(o.marker_on);
  // Patches code, so before any thread starts; the sites are built disabled.
  if (is_variant(o) && o.marker_on) variants::set_enabled(true);

  std::vector<ThreadResult> results(o.threads);
  StartLine start(static_cast<std::ptrdiff_t>(o.threads), StopFirst{o.stop_before_loop});
  std::vector<std::thread> workers;
  for (unsigned i = 1; i < o.threads; ++i) {
    workers.emplace_back(run_thread, std::cref(o), i, site, std::ref(start), std::ref(results[i]));
  }
  run_thread(o, 0, site, start, results[0]);
  for (auto& w : workers) w.join();
  std::cout << report(o, results).dump() << "\n";
  return 0;
}
