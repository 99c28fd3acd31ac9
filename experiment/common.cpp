#include "experiment/common.hpp"

#include "compare/stats.hpp"

namespace probecost::exp {

CompareConfig base_config(const ExperimentConfig& cfg) {
  CompareConfig c;
  c.inferior = cfg.inferior;
  c.repeat = cfg.quick ? 1 : cfg.repeat;
  c.placement = Placement::SameCpu;
  c.rates = {};
  c.judge_noise = false;
  return c;
}

Mechanism scaled(Mechanism m, double scale, std::uint64_t floor) {
  auto n = static_cast<std::uint64_t>(static_cast<double>(m.default_iterations) * scale);
  m.default_iterations = std::max(n, floor);
  return m;
}

std::vector<MechanismId> mechanism_list(const ExperimentConfig& cfg,
                                        const std::vector<MechanismId>& defaults) {
  return cfg.mechanisms.empty() ? defaults : cfg.mechanisms;
}

void collect_problems(const CompareResult& r, const std::string& context, Experiment& e) {
  for (const auto& m : r.mechanisms) {
    if (!m.problem.empty())
      e.problems.push_back(context + ", " + m.mechanism.name + ": " + m.problem);
  }
}

std::string hits_cell(const MechanismResult& m) {
  if (!m.skipped.empty()) return "skipped";
  if (!m.problem.empty()) return "WRONG";
  return m.mechanism.probing() ? "exact" : "-";
}

double median_cycles_per_iter(const MechanismResult& m) {
  std::vector<double> v;
  for (const auto& s : m.samples) v.push_back(s.cycles_per_iter);
  return summarize(v).median;
}

Progress phase(const Progress& progress, const std::string& label) {
  if (!progress) return nullptr;
  return [progress, label](int done, int total, const std::string& what) {
    progress(done, total, done == total ? what : label + ": " + what);
  };
}

}  // namespace probecost::exp
