#pragma once
// Runs the inferior once under one mechanism and turns its report (and the tracer's own
// accounting) into a Sample.
#include <cstdint>
#include <string>
#include <vector>

#include "compare/mechanism.hpp"

namespace probecost {

enum class Placement {
  SameCpu,  // tracer and tracee threads on one CPU: reproducible, no cross-CPU wake-ups
  Split,    // tracer on one CPU, tracee on another: every stop is a cross-CPU wake-up
  Free,     // no pinning: what a user gets by default
  Follow,   // the tracee untouched; the tracer pins itself to the CPU the tracee is on
};
Placement parse_placement(const std::string& text);
std::string placement_name(Placement p);

inline constexpr int kFollowTracee = -2;  // tracer_cpu: wherever the tracee runs at start

struct CpuPlan {
  int tracer_cpu = -1;  // -1: not pinned; kFollowTracee
  int tracee_cpu = -1;
  std::string describe() const;
};
CpuPlan plan_cpus(Placement p, int cpus);

struct RunConfig {
  std::string inferior;          // path of probecost-inferior
  std::uint64_t iterations = 0;  // 0: the mechanism's default
  unsigned threads = 1;
  std::string work = "empty";
  CpuPlan cpus;
  std::string step_over;  // non-empty: overrides the strategy of fast mechanisms ("auto")
};

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
};

Sample run_once(const Mechanism& m, const RunConfig& cfg);

}  // namespace probecost
