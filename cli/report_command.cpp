// probecost report -o FILE.html: the experiments drawn on one self-contained page.
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <optional>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/output.hpp"
#include "cli/parse.hpp"
#include "common/error.hpp"
#include "common/format.hpp"
#include "report/html.hpp"
#include "report/results.hpp"

namespace po = boost::program_options;

namespace probecost::cli {

namespace {

// What --from gave: the seeds' experiments, and the user's own compare and overhead results.
struct Inputs {
  std::vector<Experiment> experiments;
  std::vector<UserResult> results;
};

// A file of `probecost experiment NAME|all -f json`, `compare -f json` or `overhead -f json`.
void read_input(const std::string& path, Inputs& in) {
  std::ifstream file(path);
  if (!file) throw UsageError("cannot read '" + path + "'");
  try {
    nlohmann::json j = nlohmann::json::parse(file);
    switch (json_kind(j)) {
      case JsonKind::Experiments:
        for (const auto& e : j.at("experiments")) in.experiments.push_back(experiment_from_json(e));
        return;
      case JsonKind::Experiment:
        in.experiments.push_back(experiment_from_json(j));
        return;
      case JsonKind::Compare:
      case JsonKind::Overhead:
        in.results.push_back({path, json_kind(j), j});
        // Drawn now, so that a file with a field missing fails before anything is written.
        user_result_section(in.results.back(), in.results.size());
        return;
      case JsonKind::Unknown:
        break;
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("'" + path + "' is not the JSON of probecost experiment, compare or " +
                     "overhead: " + e.what());
  }
  throw UsageError("'" + path + "' is not the JSON of probecost experiment, compare or overhead");
}

}  // namespace

int report_command(const std::vector<std::string>& args) {
  ExperimentConfig cfg;
  std::vector<std::string> from;
  std::string output, json_out, repeat;
  po::options_description desc(
      "probecost report -o FILE.html [options]\n\n"
      "Runs the four experiments (or reads their JSON with --from) and writes one HTML page with\n"
      "inline SVG charts: cost per hit per mechanism, CPU share against event rate, scalability,\n"
      "handlers per address, the marker variants; each experiment's table beside its seed's;\n"
      "the machine. --from also takes the JSON of your own 'probecost compare' and 'probecost\n"
      "overhead' runs, drawn after the experiments. Nothing in the page is loaded from the\n"
      "network. Running the experiments takes several minutes (progress on stderr).\n\noptions");
  desc.add_options()("help,h", "this help")("output,o", po::value(&output), "the HTML file")(
      "from", po::value(&from)->multitoken(),
      "JSON files of 'probecost experiment NAME|all -f json' instead of running them, and of\n"
      "'probecost compare -f json' or 'probecost overhead -f json' (several, or repeated)")(
      "json", po::value(&json_out), "also write the experiments' JSON to FILE")(
      "repeat,r", po::value(&repeat)->default_value("5"), "runs of each measurement")(
      "quick", "tiny runs (exact hits checked, figures meaningless): for tests")(
      "inferior", po::value(&cfg.inferior), "path of probecost-inferior")(
      "quiet,q", "no progress and no notes on stderr");
  auto vm = parse_options(args, desc, "report");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (output.empty()) throw UsageError("-o FILE.html is required");
  cfg.repeat = static_cast<unsigned>(parse_count("--repeat", repeat, 1));
  cfg.quick = vm.count("quick") > 0;
  // Both files opened before anything runs: one that cannot be written fails now.
  Output html(output);
  std::optional<Output> json;
  if (!json_out.empty()) json.emplace(json_out);

  bool quiet = vm.count("quiet") > 0;
  Inputs in;
  for (const auto& f : from) read_input(f, in);
  if (from.empty()) {
    cfg.inferior = find_inferior(cfg.inferior);
    if (!quiet) {
      std::cerr << "probecost report: running the four experiments (several minutes; "
                   "'probecost experiment all -f json -o FILE' and 'report --from FILE' draw "
                   "saved ones)\n";
    }
    in.experiments = run_experiments(all_experiments(), cfg, "report", quiet);
  }
  if (json) json->write(json_dump(experiments_json(in.experiments)) + "\n");
  html.write(
      render([&](std::ostream& out) { write_html_report(out, in.experiments, in.results); }));
  if (!quiet)
    std::cerr << "probecost report: wrote " << output << " (" << in.experiments.size()
              << " experiment(s), " << in.results.size() << " result(s) of your own)\n";
  bool ok = true;
  for (const auto& e : in.experiments) ok = ok && e.problems.empty();
  return ok ? 0 : 1;
}

}  // namespace probecost::cli
