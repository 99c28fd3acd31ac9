// probecost replay [--report] PATH [options]: what `probecost record` wrote, as uftrace replay
// and uftrace report show theirs.
#include <boost/program_options.hpp>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/parse.hpp"
#include "common/error.hpp"
#include "common/format.hpp"
#include "replay/replay.hpp"

namespace po = boost::program_options;

namespace probecost::cli {

namespace {

// --time-range START~END, either end left out ("~2s", "500ms~").
void parse_range(const std::string& text, replay::Filter& f) {
  auto tilde = text.find('~');
  if (tilde == std::string::npos)
    throw UsageError("bad --time-range '" + text + "': want START~END, such as 100ms~2s or ~1s");
  std::string from = text.substr(0, tilde), to = text.substr(tilde + 1);
  if (!from.empty()) f.from_ns = parse_elapsed_ns("--time-range", from);
  if (!to.empty()) f.to_ns = parse_elapsed_ns("--time-range", to);
  if (f.to_ns <= f.from_ns)
    throw UsageError("bad --time-range '" + text + "': its end is not after its start");
}

po::variables_map parse(const std::vector<std::string>& args, const po::options_description& desc) {
  po::options_description hidden;
  hidden.add_options()("path", po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description positional;
  positional.add("path", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see 'probecost replay --help')");
  }
  if (vm.count("path") && vm["path"].as<std::vector<std::string>>().size() > 1)
    throw UsageError("one recording at a time: '" + vm["path"].as<std::vector<std::string>>()[1] +
                     "' is a second PATH");
  return vm;
}

}  // namespace

int replay_command(const std::vector<std::string>& args) {
  replay::Filter filter;
  std::vector<std::string> tids;
  std::string range, depth, format;
  po::options_description desc(
      "probecost replay [--report] PATH [options]\n\n"
      "Reads a recording of `probecost record` (its Chrome JSON file or its CTF directory) and\n"
      "prints each thread's calls nested, with their durations, arguments and results, as\n"
      "`uftrace replay` does; with --report, per function: calls, total and self time, mean,\n"
      "min, p50, p90, p99 and max, as `uftrace report` does. Times in a range are from the\n"
      "recording's first call.\n\n"
      "exit status: 0; 2: bad usage, or PATH is missing or not a recording; 1: a recording cut\n"
      "short or unreadable.\n\noptions");
  desc.add_options()("help,h", "this help")("report",
                                            "the per-function table instead of the calls")(
      "per-thread", "--report: also one table per thread")(
      "tid,t", po::value(&tids)->composing(),
      "only these threads (repeatable, or comma-separated)")(
      "function,F", po::value(&filter.functions)->composing(),
      "only this function and the calls it makes (repeatable; \"middle\" matches "
      "\"middle(long)\")")("time-range,r", po::value(&range),
                           "only calls that start in START~END from the first call, such as "
                           "100ms~2s, ~500us or 1s~ (units ns, us, ms, s, m)")(
      "depth,D", po::value(&depth), "the tree: at most N levels below the outermost shown")(
      "format,f", po::value(&format)->default_value("text"),
      "text, or json (with --report: every time in ns)");
  po::variables_map vm = parse(args, desc);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (!vm.count("path")) throw UsageError("no recording: give PATH (what record -o wrote)");
  std::string path = vm["path"].as<std::vector<std::string>>().front();
  for (const auto& t : split_commas(tids))
    filter.tids.insert(static_cast<std::int32_t>(parse_count("--tid", t, 1, INT32_MAX)));
  if (!range.empty()) parse_range(range, filter);
  if (!depth.empty())
    filter.max_depth = static_cast<int>(parse_count("--depth", depth, 1, 1 << 20));
  bool report = vm.count("report") > 0;
  Format f = parse_format(format, {Format::Text, Format::Json});
  if (f == Format::Json && !report) throw UsageError("--format json goes with --report");
  if (vm.count("per-thread") && !report) throw UsageError("--per-thread goes with --report");

  replay::Collected rec(/*keep_args=*/!report);
  replay::read_recording(path, rec);
  rec.sort();
  if (!report)
    replay::print_tree(std::cout, rec, filter);
  else if (f == Format::Json)
    replay::print_report_json(std::cout, rec, filter);
  else
    replay::print_report(std::cout, rec, filter, vm.count("per-thread") > 0);
  std::cout.flush();
  if (!std::cout) throw Error::from_errno("cannot write the output");
  return 0;
}

}  // namespace probecost::cli
