#pragma once
// Runs the inferior once under one mechanism and turns its report (and the tracer's own
// accounting) into a Sample.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compare/mechanism.hpp"
#include "compare/placement.hpp"

namespace probecost {

struct RunConfig {
  std::string inferior;          // path of probecost-inferior
  std::uint64_t iterations = 0;  // 0: the mechanism's default
  unsigned threads = 1;
  std::string work = "empty";
  CpuPlan cpus;
  // Given: the strategy of the mechanisms whose own is Auto (int3-ptrace stays singlestep).
  std::optional<StepOverChoice> step_over;
  unsigned handlers = 0;      // traced and uprobe mechanisms: handlers run per hit (0: the
                              // mechanism's own count only; N: N counting handlers / N events)
  unsigned spare_probes = 0;  // traced mechanisms: also an int3 on this many of the inferior's
                              // spare sites (uprobe: see SpareUprobes)
};

// The inferior's never-called spare sites (inferior/spares.S): 16-byte slots under one symbol.
inline constexpr const char* kSpareSitesSymbol = "probecost_spare_sites";
inline constexpr std::uint64_t kSpareSiteBytes = 16;

struct Sample {
  std::uint64_t iterations = 0;  // per thread
  unsigned threads = 0;
  std::uint64_t hits = 0;        // as the mechanism counts them (see HitSource)
  std::uint64_t site_calls = 0;  // as the inferior counted them
  double ns_per_iter = 0;        // median over threads of loop time / iterations
  double cycles_per_iter = 0;
  double tracee_cpu_ns = 0;    // all threads' CPU time in their loops
  double tracer_cpu_ns = 0;    // the tracer's CPU time while the tracee ran
  double cpu_ns_per_iter = 0;  // (tracee + tracer) / (iterations x threads)
  std::uint64_t tracer_syscalls = 0;
  std::uint64_t tracer_stops = 0;
  bool marker_valid = true;
  std::string problem;  // non-empty: the run is not to be trusted, and why
  std::vector<int> tracee_cpus_seen;
  std::string step_over_plan;  // how the site was stepped over, and why
  std::uint64_t checksum = 0;  // the kind sites' result (see inferior/kinds.S)
  std::uint64_t slot = 0;
  std::string skipped;  // non-empty: the machine refused the mechanism, and why (not an error)
  std::vector<std::uint64_t> handler_hits;  // with RunConfig::handlers: each handler's count
  std::uint64_t spare_probes = 0;           // probes installed on spare sites
  std::uint64_t spare_hits = 0;             // must stay 0
  double wall_ns = 0;  // first thread's loop start to last thread's loop end: all hits took this
  std::uint64_t tracee_minflt = 0;  // the program's minor page faults in its loops
};

Sample run_once(const Mechanism& m, const RunConfig& cfg);

class TracedProcess;
// Faults in the read-write pages of every jump area of `p` (header, counters, event rings) and
// of its call buffer (record) before the timed loop, as LTTng touches its buffers at session setup:
// the first lap round a 1.5 MiB ring would otherwise take a page fault per 4 KiB (the memfd's pages
// are allocated and mapped on first touch), charged to the first hits. MADV_POPULATE_WRITE runs in
// the tracee (every thread stopped); a kernel before 5.14 refuses it (EINVAL) and the faults stay
// in the figure.
void populate_jump_areas(TracedProcess& p);

}  // namespace probecost
