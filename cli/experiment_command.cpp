// probecost experiment NAME|all: the seeds' measurements redone, each beside the seed's figures.
#include <boost/program_options.hpp>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/output.hpp"
#include "cli/parse.hpp"
#include "common/error.hpp"
#include "common/format.hpp"
#include "compare/mechanism.hpp"
#include "experiment/experiment.hpp"

namespace po = boost::program_options;

namespace probecost::cli {

namespace {

struct ExperimentArgs {
  ExperimentConfig cfg;
  std::string format = "text", output, repeat;
};

po::options_description experiment_options(ExperimentArgs& a, std::vector<std::string>& mechs) {
  po::options_description desc(
      "probecost experiment NAME [options]\n\n"
      "NAME is one of\n"
      "  markers          seeds 000, 002: marker variants disabled and enabled, empty and\n"
      "                   4 KiB memcpy loops, cycles, ns and code bytes\n"
      "  scalability      seed 001: 1, 2, 4, 8 threads hitting one probe at once\n"
      "  multi-probe      seed 003: 1..8 handlers on one address; 1,000 probes elsewhere\n"
      "  int3-vs-marker   seed 004: today's compare verdict beside the 2006 figures\n"
      "  all              the four, one after the other\n\noptions");
  desc.add_options()("help,h", "this help")("repeat,r", po::value(&a.repeat)->default_value("5"),
                                            "runs of each measurement")(
      "quick", "tiny runs (exact hits checked, figures meaningless): for tests")(
      "mechanisms,m", po::value(&mechs)->multitoken(),
      "scalability, multi-probe, int3-vs-marker: these mechanisms instead of the defaults")(
      "format,f", po::value(&a.format)->default_value("text"), "text or json")(
      "output,o", po::value(&a.output), "write to FILE")("inferior", po::value(&a.cfg.inferior),
                                                         "path of probecost-inferior")(
      "quiet,q", "no progress on stderr");
  return desc;
}

}  // namespace

std::vector<Experiment> run_experiments(const std::vector<ExperimentId>& ids,
                                        const ExperimentConfig& cfg, const std::string& command,
                                        bool quiet) {
  std::vector<Experiment> out;
  for (ExperimentId id : ids) {
    Progress line = progress_for(command, quiet);
    Progress progress;
    std::string n = experiment_name(id);
    if (line)
      progress = [line, n](int d, int t, const std::string& w) { line(d, t, n + ": " + w); };
    out.push_back(run_experiment(id, cfg, progress));
  }
  return out;
}

nlohmann::json experiments_json(const std::vector<Experiment>& list) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& e : list) all.push_back(experiment_json(e));
  return {{"experiments", all}};
}

int experiment_command(const std::vector<std::string>& args) {
  ExperimentArgs a;
  std::vector<std::string> mechs;
  po::options_description desc = experiment_options(a, mechs);
  // NAME is positional: parsed, but not listed among the options in --help (the usage line and
  // the list above it say what it is).
  po::positional_options_description pos;
  pos.add("name", 1);
  std::string name;
  po::options_description hidden;
  hidden.add_options()("name", po::value(&name));
  po::options_description all;
  all.add(desc).add(hidden);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see 'probecost experiment --help')");
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (name.empty()) throw UsageError("which experiment? (see 'probecost experiment --help')");
  Format format = parse_format(a.format, {Format::Text, Format::Json});
  a.cfg.repeat = static_cast<unsigned>(parse_count("--repeat", a.repeat, 1));
  a.cfg.quick = vm.count("quick") > 0;
  std::vector<ExperimentId> ids = parse_experiments(name);
  a.cfg.mechanisms = parse_mechanisms(split_commas(mechs));  // fails before anything runs
  a.cfg.inferior = find_inferior(a.cfg.inferior);
  Output output(a.output);  // before anything runs: a report that cannot be written fails now

  std::vector<Experiment> list = run_experiments(ids, a.cfg, "experiment", vm.count("quiet") > 0);
  output.write(render([&](std::ostream& out) {
    if (format == Format::Json) {
      out << json_dump(list.size() == 1 ? experiment_json(list[0]) : experiments_json(list))
          << "\n";
      return;
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i) out << "\n\n";
      write_experiment_text(out, list[i]);
    }
  }));
  bool ok = true;
  for (const auto& e : list) ok = ok && e.problems.empty();
  if (!ok) std::cerr << "probecost experiment: some figures are not to be trusted (see WARNING)\n";
  return ok ? 0 : 1;
}

}  // namespace probecost::cli
