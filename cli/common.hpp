#pragma once
// What the subcommands share: rates and lists, the inferior's path, rendering, progress.
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace probecost::cli {

std::vector<double> parse_rates(const std::vector<std::string>& texts);
// {"a,b", "c"} -> {"a", "b", "c"}
std::vector<std::string> split_commas(const std::vector<std::string>& in);
// `path`, or probecost-inferior next to probecost; UsageError when it is not executable.
std::string find_inferior(std::string path);
// "[3/10] what" on one line of stderr, cleared at the end.
void progress_line(int done, int total, const std::string& what);
// The progress of a long run (experiment, report) on stderr: progress_line on a terminal;
// elsewhere (a log file, CI) "probecost CMD: [3/10] what (12 s)" lines, one at the start and
// then at most one every 10 s, so that a log shows it is moving without filling up.
std::function<void(int, int, const std::string&)> progress_for(const std::string& command);

// Renders a report into a string, for Output::write.
template <typename F>
std::string render(F&& write) {
  std::ostringstream out;
  write(out);
  return out.str();
}

}  // namespace probecost::cli
