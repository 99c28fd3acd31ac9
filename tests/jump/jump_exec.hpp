#pragma once
// What the in-process tests of jump-patched probes share: a kind's site planned and placed in
// a LocalArea of its own (counting with lock inc, per CPU with rseq, or with events), the kind
// functions run with known arguments, and four threads through one site.
#include <sys/rseq.h>
#include <sys/sysinfo.h>

#include <barrier>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "inferior/sites.hpp"
#include "self_patch.hpp"

namespace probecost::selftest {

using KindFn = void (*)(std::uint64_t);

// The function a kind's site is in: probecost_call_KIND, except the ret kind, whose site is
// a function of its own.
inline std::string function_of(const std::string& kind) {
  return kind == "ret" ? "probecost_kind_ret" : "probecost_call_" + kind;
}

struct Patched {
  std::unique_ptr<LocalArea> area;
  JumpPlan plan;
  jump::PlacedSite placed;
  std::unique_ptr<PatchSite> site;
};

inline std::optional<JumpPlan> plan_kind(const std::string& kind, std::string& why) {
  Function f = function_named(function_of(kind));
  return plan_jump(f.start, f.code, address_of("probecost_kind_" + kind), why);
}

// How a trampoline counts: lock inc, per CPU with rseq, or with an event record per hit.
enum class Mode { Count, PerCpu, Events };

inline std::string name_of(Mode m) {
  return m == Mode::Count ? "count" : m == Mode::PerCpu ? "percpu" : "events";
}

inline void PrintTo(Mode m, std::ostream* os) {
  *os << name_of(m);
}

inline Patched place(const JumpPlan& plan, Mode mode, std::uint64_t ring = 1 << 12,
                     std::uint32_t cpus = 0, FlagSave flags = FlagSave::Lahf) {
  Patched p;
  jump::AreaConfig config{4, 4096, 1, ring};
  if (mode == Mode::PerCpu) {
    if (!have_rseq()) throw Error("no rseq registration in this process");
    config.cpus = cpus ? cpus : static_cast<std::uint32_t>(get_nprocs_conf());
    config.rseq_offset = static_cast<std::int32_t>(__rseq_offset);
  }
  p.area = std::make_unique<LocalArea>(plan.site, config);
  p.plan = plan;
  std::string why;
  auto placed = p.area->writer().add_site(plan, site_options(7, mode == Mode::Events, flags), why);
  if (!placed) throw Error("cannot place: " + why);
  p.placed = *placed;
  p.site = std::make_unique<PatchSite>(SelfMemory::instance(), p.placed.patch);
  return p;
}

inline std::uint64_t arg_of(std::uint64_t i) {
  // Around the flags kind's cmp $5, and negative too.
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(i % 13) - 3) + (i << 20);
}

struct Result {
  std::uint64_t checksum, slot;
  bool operator==(const Result&) const = default;
};

inline Result run(KindFn fn, std::uint64_t n) {
  probecost_kinds_checksum = 0;
  probecost_kinds_slot = 0;
  for (std::uint64_t i = 0; i < n; ++i) fn(arg_of(i));
  return {probecost_kinds_checksum, probecost_kinds_slot};
}

inline std::vector<std::uint8_t> bytes_at(RuntimeAddr at, std::size_t n) {
  std::vector<std::uint8_t> b(n);
  SelfMemory::instance().read(at, b);
  return b;
}

// Four threads through one site: thread t calls with arg (t << 32 | i).
constexpr int kThreads = 4;

inline void hammer(KindFn fn, std::uint64_t calls, std::barrier<>& start) {
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (std::uint64_t i = 0; i < calls; ++i) fn(std::uint64_t(t) << 32 | i);
    });
  }
  for (auto& th : threads) th.join();
}

}  // namespace probecost::selftest
