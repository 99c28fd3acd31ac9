#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiment/experiment.hpp"

namespace probecost::cli {

// Each returns the process exit code; bad usage throws UsageError (exit 2).
int compare_command(const std::vector<std::string>& args);
int overhead_command(const std::vector<std::string>& args);
int bench_command(const std::vector<std::string>& args);
int trace_command(const std::vector<std::string>& args);
int record_command(const std::vector<std::string>& args);
int experiment_command(const std::vector<std::string>& args);
int report_command(const std::vector<std::string>& args);
int replay_command(const std::vector<std::string>& args);

// The experiments, in that order, with progress on stderr (progress_for, none when `quiet`),
// said to come from `command`.
std::vector<Experiment> run_experiments(const std::vector<ExperimentId>& ids,
                                        const ExperimentConfig& cfg,
                                        const std::string& command = "experiment",
                                        bool quiet = false);
// {"experiments": [...]}
nlohmann::json experiments_json(const std::vector<Experiment>& list);
int restore_command(const std::vector<std::string>& args);

}  // namespace probecost::cli
