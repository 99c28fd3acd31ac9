#pragma once
// What the subcommands share: rates and lists, the inferior's path, rendering, progress.
#include <sys/types.h>

#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace probecost {
struct TraceOptions;
}

namespace probecost::cli {

std::vector<double> parse_rates(const std::vector<std::string>& texts);
// {"a,b", "c"} -> {"a", "b", "c"}
std::vector<std::string> split_commas(const std::vector<std::string>& in);
// `path`, or probecost-inferior next to probecost; UsageError when it is not executable.
std::string find_inferior(std::string path);
// "[3/10] what" on one line of stderr, cleared at the end.
void progress_line(int done, int total, const std::string& what);

// The steps of a long run on a terminal (compare's runs, an experiment's, overhead's), on
// stderr: a line "probecost CMD: [3/55] marker run 1/5: 0.8 s" as each step ends, and the step
// under way drawn below the last such line, redrawn by the next; cleared at the end.
class StepLines {
 public:
  explicit StepLines(std::string command) : command_(std::move(command)) {}
  ~StepLines() { finish(); }
  StepLines(const StepLines&) = delete;
  StepLines& operator=(const StepLines&) = delete;

  // Step `what` starts, the `done + 1`th of `total` (0: no count); the one under way has ended.
  // done == total: every step has ended, `what` is not one.
  void start(const std::string& what, int done = 0, int total = 0);
  // The step under way has ended; the line drawn for it is cleared.
  void finish();

 private:
  std::string command_, current_, count_;
  double started_ = 0;
};

// Where a command's progress goes (stderr, never stdout): nothing with -q (`quiet`); StepLines on
// a terminal; elsewhere (a log file, CI), with `heartbeat`, "probecost CMD: [3/10] what (12 s)"
// lines, one at the start and then at most one every 10 s, so that a log shows it is moving
// without filling up; without, nothing.
std::function<void(int, int, const std::string&)> progress_for(const std::string& command,
                                                               bool quiet = false,
                                                               bool heartbeat = true);

// Whether a status line may be drawn (common/status_line.hpp): standard error is a terminal, and
// the traced program
// (`pid`, or, for a command we launch, our own streams, which it inherits) has neither its
// standard input nor its standard output on that terminal: a full-screen program (vim, less,
// top) draws there, and a line of ours would land in the middle of its screen.
bool status_line_allowed(pid_t pid);

// Renders a report into a string, for Output::write.
template <typename F>
std::string render(F&& write) {
  std::ostringstream out;
  write(out);
  return out.str();
}

// The combinations of trace and record options that one kind of probe cannot serve
// (--stacks with no copy on jump probes, --usdt-args on jump probes, --events on int3 ones):
// UsageError, before anything is traced.
void check_probe_kinds(const TraceOptions& opts);

}  // namespace probecost::cli
