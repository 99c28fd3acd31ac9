#pragma once
// Helpers the experiments share.
#include <string>

#include "common/format.hpp"
#include "compare/compare.hpp"
#include "compare/report.hpp"
#include "experiment/experiment.hpp"

namespace probecost::exp {

// Same-cpu placement, the experiment's inferior and repetitions, no extrapolation rates.
CompareConfig base_config(const ExperimentConfig& cfg);
// The mechanism with its default iteration count scaled (by threads, for --quick), at least
// `floor`.
Mechanism scaled(Mechanism m, double scale, std::uint64_t floor = 200);
// The list given with -m, or `defaults`.
std::vector<MechanismId> mechanism_list(const ExperimentConfig& cfg,
                                        const std::vector<MechanismId>& defaults);
// Records every untrustworthy mechanism of `r` as a problem of `e`, naming `context`.
void collect_problems(const CompareResult& r, const std::string& context, Experiment& e);
// "exact" when every run counted every hit, else the problem; skipped mechanisms say so.
std::string hits_cell(const MechanismResult& m);
// Medians of the samples' absolute per-iteration figures.
double median_cycles_per_iter(const MechanismResult& m);
// A progress callback that prefixes each step with `phase`.
Progress phase(const Progress& progress, const std::string& label);

}  // namespace probecost::exp
