#include "cli/commands.hpp"

#include <unistd.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>

#include "cli/common.hpp"
#include "cli/output.hpp"
#include "cli/parse.hpp"
#include "common/error.hpp"
#include "compare/bench.hpp"
#include "compare/compare.hpp"
#include "compare/report.hpp"

namespace po = boost::program_options;

namespace probecost::cli {

namespace {

// 1 when a row failed (a wrong hit count, a run that failed); a figure that is only noise (the
// runs completed, every hit counted) is a warning, and exit 0 unless `strict`: a busy machine
// makes noise, and a script should not take it for a broken tool.
int compare_status(const CompareResult& result, bool strict) {
  if (result.failed()) {
    std::cerr << "probecost compare: some measurements failed (see WARNING)\n";
    return 1;
  }
  if (result.trustworthy()) return 0;
  std::cerr << "probecost compare: warning: some figures are noise, not costs (see WARNING); "
            << (strict ? "--strict: exit 1"
                       : "more --iterations or --repeat, or a quieter machine, may settle them")
            << "\n";
  return strict ? 1 : 0;
}

}  // namespace

int compare_command(const std::vector<std::string>& args) {
  CompareConfig cfg;
  std::vector<std::string> mechanisms, rates;
  std::string placement, format, output, iterations, repeat, threads, step_over;
  po::options_description desc(
      "probecost compare [options]\n\n"
      "Runs probecost-inferior under each mechanism, --repeat times each, and reports the cost\n"
      "per hit (minus the baseline), in ns, TSC cycles and CPU time (tracee + tracer), and the\n"
      "CPU share at each --rate.\n\n"
      "mechanisms: baseline, marker-off, marker, int3-signal, int3-ptrace, int3-ptrace-fast,\n"
      "jump, record, uprobe, uprobe-nop5, uprobe-push, ptrace-floor\n\noptions");
  desc.add_options()("help,h", "this help")(
      "mechanisms,m", po::value(&mechanisms)->multitoken(),
      "mechanisms to run (comma-separated or repeated; default all); baseline always runs")(
      "iterations,n", po::value(&iterations),
      "iterations per thread (default: per mechanism, 5M cheap .. 20k ptrace)")(
      "repeat,r", po::value(&repeat)->default_value("5"), "runs of each mechanism")(
      "threads,t", po::value(&threads)->default_value("1"), "inferior threads hitting the site")(
      "work,w", po::value(&cfg.work)->default_value("empty"),
      "work per iteration: empty or memcpy:BYTES")(
      "rate", po::value(&rates)->multitoken(),
      "event rate(s) to extrapolate to, e.g. 750k, 1.2M (repeatable; default 750000)")(
      "placement", po::value(&placement)->default_value("same-cpu"),
      "where tracer and tracee run: same-cpu (both on CPU 0), split (CPUs 0 and 1), free\n"
      "(no pinning), follow (tracer pinned where the tracee started, tracee free) or spread\n"
      "(tracee thread i on CPU i mod CPUs, tracer on CPU 0)")(
      "format,f", po::value(&format)->default_value("text"), "text, json or csv")(
      "output,o", po::value(&output), "write the report to FILE")(
      "inferior", po::value(&cfg.inferior), "path of probecost-inferior")(
      "step-over", po::value(&step_over)->default_value("auto"),
      "int3-ptrace-fast's strategy: singlestep, emulate, outline or auto")(
      "verbose,v", "also system calls and stops per hit, CPU split")("quiet,q",
                                                                     "no progress lines on stderr")(
      "strict", "exit 1 when a figure is noise (default: a warning, exit 0)");
  auto vm = parse_options(args, desc, "compare");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (!rates.empty()) cfg.rates = parse_rates(split_commas(rates));
  if (vm.count("iterations"))
    cfg.iterations = parse_count("--iterations", iterations, 1, UINT64_MAX);
  cfg.repeat = static_cast<unsigned>(parse_count("--repeat", repeat, 1));
  cfg.threads = static_cast<unsigned>(parse_count("--threads", threads, 1, 4096));
  check_work(cfg.work);
  cfg.placement = parse_placement(placement);
  cfg.step_over = parse_step_over(step_over);
  Format f = parse_format(format);
  // Unknown names fail here, before anything runs.
  if (!mechanisms.empty()) cfg.mechanisms = parse_mechanisms(split_commas(mechanisms));
  cfg.inferior = find_inferior(cfg.inferior);
  Output out(output);  // before anything runs: a report that cannot be written fails now

  CompareResult result =
      run_compare(cfg, progress_for("compare", vm.count("quiet") > 0, /*heartbeat=*/false));
  out.write(render([&](std::ostream& o) { write_report(o, result, f, vm.count("verbose") > 0); }));
  return compare_status(result, vm.count("strict") > 0);
}

int bench_command(const std::vector<std::string>& args) {
  // `probecost bench --help`: step-over's help, the one benchmark there is.
  bool help = !args.empty() && (args[0] == "--help" || args[0] == "-h");
  if (!help && (args.empty() || args[0] != "step-over")) {
    throw UsageError("which benchmark? 'probecost bench step-over' is the one there is");
  }
  BenchConfig cfg;
  std::vector<std::string> kinds, strategies;
  std::string placement, format, output, inferior, iterations, threads, repeat;
  po::options_description desc(
      "probecost bench step-over [options]\n\n"
      "Traces probe sites whose first instruction is each kind (nop, push, ret, RIP-relative\n"
      "load, jcc, ...) with each step-over strategy, and prints ns per hit (minus the same\n"
      "site untraced), ptrace-stops and tracer system calls per hit, and whether the program's\n"
      "result was the same as untraced.\n\noptions");
  desc.add_options()("help,h", "this help")("kinds,k", po::value(&kinds)->multitoken(),
                                            "instruction kinds (default all)")(
      "strategies,s", po::value(&strategies)->multitoken(),
      "strategies (default singlestep,emulate,outline,auto)")(
      "iterations,n", po::value(&iterations)->default_value("20000"), "hits per thread")(
      "threads,t", po::value(&threads)->default_value("1"), "inferior threads")(
      "repeat,r", po::value(&repeat)->default_value("3"), "runs of each")(
      "placement", po::value(&placement)->default_value("same-cpu"), "same-cpu, split or free")(
      "format,f", po::value(&format)->default_value("text"), "text, json or csv")(
      "output,o", po::value(&output), "write to FILE")("inferior", po::value(&cfg.inferior),
                                                       "path of probecost-inferior");
  std::vector<std::string> rest(args.begin() + (help ? 0 : 1), args.end());
  auto vm = parse_options(rest, desc, "bench step-over");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (!kinds.empty()) cfg.kinds = split_commas(kinds);
  if (!strategies.empty()) {
    cfg.strategies.clear();
    for (const auto& s : split_commas(strategies)) cfg.strategies.push_back(parse_step_over(s));
  }
  cfg.iterations = parse_count("--iterations", iterations, 1, UINT64_MAX);
  cfg.threads = static_cast<unsigned>(parse_count("--threads", threads, 1, 4096));
  cfg.repeat = static_cast<unsigned>(parse_count("--repeat", repeat, 1));
  cfg.placement = parse_placement(placement);
  Format f = parse_format(format);
  cfg.inferior = find_inferior(cfg.inferior);
  Output out(output);
  BenchResult result = run_step_over_bench(cfg, ::isatty(STDERR_FILENO) ? progress_line : nullptr);
  out.write(render([&](std::ostream& o) { write_bench(o, result, f); }));
  return result.all_correct() ? 0 : 1;
}

}  // namespace probecost::cli
