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

namespace po = boost::program_options;

namespace probecost::cli {

namespace {

// A file of `probecost experiment NAME -f json` (one experiment) or of `... all` (several).
std::vector<Experiment> read_experiments(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read '" + path + "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    std::vector<Experiment> out;
    if (j.contains("experiments")) {
      for (const auto& e : j.at("experiments")) out.push_back(experiment_from_json(e));
    } else {
      out.push_back(experiment_from_json(j));
    }
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("'" + path + "' is not the JSON of probecost experiment: " + e.what());
  }
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
      "the machine. Nothing in the page is loaded from the network.\n\noptions");
  desc.add_options()("help,h", "this help")("output,o", po::value(&output), "the HTML file")(
      "from", po::value(&from)->multitoken(),
      "JSON of 'probecost experiment NAME|all -f json' instead of running them (repeatable)")(
      "json", po::value(&json_out), "also write the experiments' JSON to FILE")(
      "repeat,r", po::value(&repeat)->default_value("5"), "runs of each measurement")(
      "quick", "tiny runs (exact hits checked, figures meaningless): for tests")(
      "inferior", po::value(&cfg.inferior), "path of probecost-inferior");
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

  std::vector<Experiment> list;
  for (const auto& f : from) {
    for (auto& e : read_experiments(f)) list.push_back(std::move(e));
  }
  if (from.empty()) {
    cfg.inferior = find_inferior(cfg.inferior);
    list = run_experiments("all", cfg);
  }
  if (json) json->write(json_dump(experiments_json(list)) + "\n");
  html.write(render([&](std::ostream& out) { write_html_report(out, list); }));
  bool ok = true;
  for (const auto& e : list) ok = ok && e.problems.empty();
  return ok ? 0 : 1;
}

}  // namespace probecost::cli
