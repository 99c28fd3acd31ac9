#pragma once
// `probecost experiment NAME`: the measurements of the seeds this project grew from, redone on
// today's machine, each printed as a table beside the seed's own figures, with what changed
// since. The same result goes to JSON, which `probecost report` draws.
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "compare/machine.hpp"
#include "compare/mechanism.hpp"

namespace probecost {

// A table: column names and rows of cells, as printed.
struct Table {
  std::string caption;
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

// The experiments, one table in experiment.cpp giving each its name and its run.
enum class ExperimentId { Markers, Scalability, MultiProbe, Int3VsMarker };
const char* experiment_name(ExperimentId id);
// Nothing for a name that is no experiment (a JSON file of another version, say).
std::optional<ExperimentId> find_experiment(const std::string& name);

struct Experiment {
  std::optional<ExperimentId> id;  // from the name; none for a name this version lacks
  std::string name;                // markers, scalability, multi-probe, int3-vs-marker
  std::string title;               // one line
  std::string seeds;               // "000, 002"
  Machine machine;
  std::string placement;  // where everything ran
  std::string load;       // the machine's load average before and after
  std::string when;       // when it ran (UTC, ISO 8601)
  std::string command;    // how to run it again
  Table today;
  std::vector<Table> then;            // the seeds' own figures
  std::vector<std::string> notes;     // what changed since, and why
  std::vector<std::string> problems;  // figures not to be trusted (inexact hits, ...)
  nlohmann::json data;                // the numbers behind the table, for the charts
};

struct ExperimentConfig {
  std::string inferior;
  unsigned repeat = 5;
  bool quick = false;  // tiny runs for tests: exact hits checked, figures meaningless
  // scalability, multi-probe, int3-vs-marker: instead of the default list
  std::vector<MechanismId> mechanisms;
};

using Progress = std::function<void(int, int, const std::string&)>;

// markers, scalability, multi-probe, int3-vs-marker, in that order.
std::vector<ExperimentId> all_experiments();
// NAME of `probecost experiment NAME`: one experiment, or "all" of them. UsageError naming the
// known experiments when `name` is neither.
std::vector<ExperimentId> parse_experiments(const std::string& name);
Experiment run_experiment(ExperimentId id, const ExperimentConfig& cfg, const Progress& progress);

Experiment run_markers(const ExperimentConfig& cfg, const Progress& progress);
Experiment run_scalability(const ExperimentConfig& cfg, const Progress& progress);
Experiment run_multi_probe(const ExperimentConfig& cfg, const Progress& progress);
Experiment run_int3_vs_marker(const ExperimentConfig& cfg, const Progress& progress);

nlohmann::json experiment_json(const Experiment& e);
Experiment experiment_from_json(const nlohmann::json& j);
void write_experiment_text(std::ostream& out, const Experiment& e);

// "1-minute load average 0.42" now (from /proc/loadavg), and the machine's CPU count.
std::string load_now();

}  // namespace probecost
