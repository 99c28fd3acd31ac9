#pragma once
// `probecost bench step-over`: every step-over strategy on probe sites whose first instruction
// is each kind the strategies handle differently (inferior/kinds.S).
#include <ostream>
#include <string>
#include <vector>

#include "compare/machine.hpp"
#include "compare/report.hpp"
#include "compare/runner.hpp"

namespace probecost {

struct BenchConfig {
  std::vector<std::string> kinds;  // empty: all
  std::vector<StepOverChoice> strategies = {StepOverChoice::SingleStep, StepOverChoice::Emulate,
                                            StepOverChoice::Outline, StepOverChoice::Auto};
  std::uint64_t iterations = 20'000;
  unsigned threads = 1;
  unsigned repeat = 3;
  Placement placement = Placement::SameCpu;
  std::string inferior;
};

struct BenchRow {
  std::string kind;
  StepOverChoice strategy = StepOverChoice::Auto;
  std::string plan;
  double ns_per_hit = 0;  // median over runs of (traced - untraced ns per iteration)
  double stops_per_hit = 0, syscalls_per_hit = 0;
  std::uint64_t hits = 0, expected_hits = 0;
  bool same_result = false;  // checksum and slot equal to the untraced run's
};

struct BenchResult {
  Machine machine;
  BenchConfig config;
  CpuPlan cpus;
  std::vector<BenchRow> rows;
  bool all_correct() const;
};

std::vector<std::string> all_kinds();
BenchResult run_step_over_bench(const BenchConfig& cfg,
                                const std::function<void(int, int, const std::string&)>& progress);
void write_bench(std::ostream& out, const BenchResult& r, Format f);

}  // namespace probecost
