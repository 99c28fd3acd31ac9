// probecost overhead -b PROBE ... [options] -- COMMAND ARGS...
// probecost overhead -p PID -b PROBE ... --duration S [options]
// probecost overhead --cost TIME [--cost TIME ...] [--rate RATE ...]
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/output.hpp"
#include "cli/parse.hpp"
#include "common/error.hpp"
#include "compare/model.hpp"
#include "overhead/calibration.hpp"
#include "overhead/overhead.hpp"
#include "overhead/report.hpp"
#include "trace/trace.hpp"
#include "tracer/symbols/probes.hpp"

namespace po = boost::program_options;

namespace probecost::cli {

namespace {

struct Args {
  std::vector<std::string> costs, rates, probes;
  std::string pid, duration, via, step_over, repeat, warmup, placement, calibration, stdin_path;
  std::string format, output, inferior;
  bool recalibrate = false, show_output = false, all_matches = false, follow_forks = false;
  bool quiet = false, strict = false;
};

po::options_description describe_options(Args& a) {
  po::options_description desc(
      "probecost overhead -b PROBE [-b PROBE ...] [options] -- COMMAND ARGS...\n"
      "probecost overhead -p PID -b PROBE [-b PROBE ...] --duration S [options]\n"
      "probecost overhead --cost TIME [--cost TIME ...] [--rate RATE ...]\n\n"
      "Runs COMMAND untraced and traced by turns (--repeat times each) and reports the\n"
      "workload's event rate (hits per untraced second), the measured slowdown, extra CPU and\n"
      "CPU per hit, and for every mechanism of a calibration the predicted CPU share and\n"
      "slowdown (cost per hit x rate), with the prediction's error for the mechanism used.\n"
      "With -p, watches a running process by turns for S seconds with jump probes at the\n"
      "same sites (a few ns a hit: its rate of events as if untraced), then S seconds traced\n"
      "as asked: the slowdown is the ratio of the two rates. Where no jump fits, its CPU alone.\n"
      "Ctrl-C reports the pairs done so far, marked partial.\n"
      "With --cost, only the arithmetic: CPU share = rate x cost; slowdown = 1 + share.\n"
      "Example: probecost overhead --cost 2.01us --rate 750k   (the 2006 int3 figure)\n\noptions");
  desc.add_options()("help,h", "this help")("probe,b", po::value(&a.probes)->composing(),
                                            "a probe, as for trace (repeatable)")(
      "pid,p", po::value(&a.pid), "watch this running process instead of a command")(
      "duration,d", po::value(&a.duration),
      "with -p: each window's length: seconds, or 500ms, 2m, 1h")(
      "via", po::value(&a.via)->default_value("auto"), "int3, jump or auto (as for trace)")(
      "step-over", po::value(&a.step_over)->default_value("auto"),
      "int3 probes: singlestep, emulate, outline or auto")(
      "repeat,r", po::value(&a.repeat)->default_value("3"),
      "untraced (or reference) + traced pairs")("warmup", po::value(&a.warmup)->default_value("1"),
                                                "untraced runs first, not counted (warm caches)")(
      "placement", po::value(&a.placement)->default_value("free"),
      "free (nothing pinned, as trace runs), same-cpu (probecost and the command on CPU 0)\n"
      "or split (CPUs 0 and 1); the calibration is made at the same placement")(
      "calibration", po::value(&a.calibration),
      "costs per hit from FILE, the output of 'probecost compare -f json' (default: a quick\n"
      "built-in calibration, cached per machine and version)")(
      "recalibrate", po::bool_switch(&a.recalibrate), "measure the built-in calibration again")(
      "stdin", po::value(&a.stdin_path)->default_value("/dev/null"),
      "the command's standard input, read afresh by each run")(
      "show-output", po::bool_switch(&a.show_output),
      "the command's stdout and stderr go to probecost's stderr (default: discarded)")(
      "all-matches", po::bool_switch(&a.all_matches),
      "a symbol found in several modules: probe all of them")(
      "follow-forks,F", po::bool_switch(&a.follow_forks),
      "traced runs probe the command's child processes too, as trace -F")(
      "inferior", po::value(&a.inferior), "probecost-inferior, for the built-in calibration")(
      "cost,c", po::value(&a.costs)->composing(),
      "arithmetic alone: cost per event with its unit, 220ns, 2.01us, 1ms (repeatable)")(
      "rate", po::value(&a.rates)->multitoken()->composing(),
      "with --cost: event rate(s), 750k, 1.2M (default 750000)")(
      "format,f", po::value(&a.format)->default_value("text"), "text or json (csv with --cost)")(
      "output,o", po::value(&a.output), "write the report to FILE")(
      "quiet,q", po::bool_switch(&a.quiet), "no progress lines on stderr")(
      "strict", po::bool_switch(&a.strict),
      "exit 1 when a figure is noise (default: a warning, exit 0)");
  return desc;
}

int cost_arithmetic(const Args& a) {
  std::vector<double> costs, rates;
  for (const auto& c : a.costs) costs.push_back(parse_cost_ns(c));
  for (const auto& r : split_commas(a.rates)) rates.push_back(parse_event_rate(r));
  if (rates.empty()) rates.push_back(750'000);
  Format f = parse_format(a.format);
  Output out(a.output);
  std::ostringstream text;
  write_cost_table(text, costs, rates, f);
  out.write(text.str());
  return 0;
}

// The command's program, as exec will look for it (PATH when it has no '/'), before anything
// runs: a typo is bad usage, not a failure found after the calibration.
void check_program(const std::string& name) {
  std::vector<std::string> candidates;
  if (name.find('/') != std::string::npos) {
    candidates.push_back(name);
  } else {
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
    for (std::string dir; std::getline(dirs, dir, ':');) {
      candidates.push_back((dir.empty() ? "." : dir) + "/" + name);
    }
  }
  for (const auto& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return;
  }
  throw UsageError("cannot run '" + name + "': " +
                   (name.find('/') != std::string::npos ? "no such executable file"
                                                        : "no such program in PATH"));
}

OverheadConfig measurement_config(const Args& a, const std::vector<std::string>& command) {
  OverheadConfig cfg;
  cfg.command = command;
  if (!a.pid.empty()) {
    char* end = nullptr;
    long pid = std::strtol(a.pid.c_str(), &end, 10);
    if (*end || pid <= 0 || pid > INT32_MAX) throw UsageError("bad PID '" + a.pid + "'");
    cfg.pid = static_cast<pid_t>(pid);
  }
  if (!cfg.pid == command.empty()) {
    throw UsageError(cfg.pid ? "give -p PID or -- COMMAND, not both"
                             : "nothing to measure: give -- COMMAND ARGS... or -p PID (or --cost "
                               "TIME for the arithmetic alone)");
  }
  if (a.probes.empty()) throw UsageError("no probe: give -b PROBE (as for probecost trace)");
  if (!command.empty()) check_program(command[0]);
  if (!a.rates.empty()) throw UsageError("--rate goes with --cost: a command's rate is measured");
  if (cfg.pid && a.duration.empty()) throw UsageError("-p PID needs --duration S");
  if (!cfg.pid && !a.duration.empty()) {
    throw UsageError("--duration is for -p PID: a command is timed from start to end");
  }
  if (cfg.pid) cfg.duration_s = parse_seconds("--duration", a.duration);
  cfg.probes = a.probes;
  for (const auto& p : cfg.probes) parse_probe(p);  // syntax errors before anything runs
  cfg.all_matches = a.all_matches;
  cfg.follow_forks = a.follow_forks;
  cfg.via = parse_via(a.via);
  cfg.step_over = parse_step_over(a.step_over);
  constexpr unsigned kMostRuns = 1000;
  cfg.repeat = static_cast<unsigned>(parse_count("--repeat", a.repeat, 1, kMostRuns));
  cfg.warmup = static_cast<unsigned>(parse_count("--warmup", a.warmup, 0, kMostRuns));
  cfg.placement = parse_placement(a.placement);
  if (cfg.placement == Placement::Follow) {
    throw UsageError("--placement follow is for compare; overhead takes free, same-cpu or split");
  }
  if (cfg.pid && cfg.placement != Placement::Free) {
    throw UsageError(
        "with -p only --placement free: probecost does not change the CPU affinity "
        "of a process it did not start");
  }
  if (::access(a.stdin_path.c_str(), R_OK) != 0) {
    throw UsageError("cannot read --stdin '" + a.stdin_path + "': " + std::strerror(errno));
  }
  cfg.stdin_path = a.stdin_path;
  cfg.show_output = a.show_output;
  return cfg;
}

int measurement(const Args& a, const std::vector<std::string>& command) {
  if (!a.costs.empty()) {
    throw UsageError("--cost is the arithmetic alone: give it without -b, -p or a command");
  }
  OverheadConfig cfg = measurement_config(a, command);
  Format f = parse_format(a.format);
  if (f == Format::Csv) throw UsageError("bad format 'csv' for a measurement (text or json)");
  if (!a.calibration.empty() && a.recalibrate) {
    throw UsageError("--recalibrate is for the built-in calibration, not --calibration FILE");
  }
  // Everything the user gave is checked before anything runs.
  std::optional<Calibration> calibration;
  if (!a.calibration.empty()) calibration = load_calibration_file(a.calibration);
  std::string inferior = calibration ? "" : find_inferior(a.inferior);
  Output out(a.output);  // before anything runs: a report that cannot be written fails now
  // A line per calibration run and per run of the command as it ends, on a terminal.
  std::optional<StepLines> steps;
  if (!a.quiet && ::isatty(STDERR_FILENO)) steps.emplace("overhead");
  if (!calibration) {
    CalibrationRequest req;
    req.placement = cfg.placement;
    req.step_over = cfg.step_over;
    req.inferior = inferior;
    req.recalibrate = a.recalibrate;
    if (steps) {
      req.progress = [&steps](int done, int total, const std::string& what) {
        steps->start("calibrating: " + what, done, total);
      };
    }
    calibration = builtin_calibration(req);
  }
  std::function<void(const std::string&)> progress;
  if (steps) progress = [&steps](const std::string& what) { steps->start(what); };
  Measurement m = measure(cfg, progress);
  if (steps) steps->finish();
  OverheadResult result = analyze(m, *calibration);
  std::ostringstream text;
  write_overhead(text, result, f);
  out.write(text.str());
  if (m.partial) {
    // A stop signal: what was done is reported (above), marked partial.
    std::cerr << "probecost overhead: interrupted after " << m.traced.size() << " of " << m.planned
              << " pairs: the report is partial\n";
    if (m.traced.empty()) return 1;
  }
  if (result.trustworthy()) return 0;
  // A failed run is a failed measurement; a window with nothing to compare is noise that a
  // busy or starved process brings, and a warning unless --strict.
  bool fail = result.failed() || a.strict;
  std::cerr << "probecost overhead: some figures are not to be trusted (see WARNING)"
            << (fail && !result.failed() ? "; --strict: exit 1" : "") << "\n";
  return fail ? 1 : 0;
}

}  // namespace

int overhead_command(const std::vector<std::string>& all_args) {
  // Everything after "--" is the command, untouched by option parsing.
  auto dashdash = std::find(all_args.begin(), all_args.end(), "--");
  std::vector<std::string> args(all_args.begin(), dashdash), command;
  if (dashdash != all_args.end()) command.assign(dashdash + 1, all_args.end());
  Args a;
  po::options_description desc = describe_options(a);
  po::variables_map vm = parse_options(args, desc, "overhead");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  bool measuring = !a.probes.empty() || !a.pid.empty() || !command.empty();
  if (!a.costs.empty() && !measuring) return cost_arithmetic(a);
  if (a.costs.empty() && !measuring) {
    throw UsageError(
        "nothing to do: give -b PROBE ... -- COMMAND ARGS..., -p PID -b PROBE ... "
        "--duration S, or --cost TIME (--cost is required for the arithmetic alone)");
  }
  return measurement(a, command);
}

}  // namespace probecost::cli
