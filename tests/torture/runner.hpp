#pragma once
// Running a corpus program: untraced, with the kernel's uprobe counting at the sites (the
// reference), and under `probecost trace` (launched, or attached once it has parked).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "corpus.hpp"

namespace torture {

struct Config {
  std::string probecost;   // path of probecost
  std::string corpus_dir;  // bin/torture
  double timeout = 120;    // seconds a run may take before it counts as hung
};

// How a program ended, as probecost reports a command's end: its exit code, or 128 + N when
// signal N killed it. Nothing when it had not ended by the deadline (it is killed then).
struct Ended {
  std::optional<int> code;
  std::string out;  // its standard output
  std::string err;  // its standard error (and probecost's, for a launched program)
};

struct Reference : Ended {
  std::vector<std::uint64_t> counts;  // the kernel's uprobe hits at each file offset asked for
  std::string uprobe_skipped;         // why there are none (no uprobe PMU, no permission)
};

// The untraced run, with a kernel uprobe counting at each of `offsets` in the program's file
// (none when empty). The uprobes are removed in the background: the kernel waits for an RCU
// grace period per uprobe it removes, ~0.1 s here, one at a time.
Reference run_reference(const Config& cfg, const Program& p,
                        const std::vector<std::uint64_t>& offsets);
// Waits until the uprobes of every reference run are removed.
void wait_for_uprobe_removal();

struct Traced {
  Ended target;
  std::optional<int> probecost_code;  // probecost's own exit code; nothing: it hung
  std::string probecost_err;
  std::optional<nlohmann::json> report;
  std::vector<std::string> argv;  // the command line, to reproduce the run
};

// `args`: what follows `probecost trace -f json -o REPORT` (--via, --step-over, -b ...); or,
// after a first "record", what follows `probecost record -o TRACE --summary-json REPORT`.
Traced run_traced(const Config& cfg, const Program& p, const std::vector<std::string>& args);

// The command line of a run as a shell would take it.
std::string shell_line(const std::vector<std::string>& argv);

}  // namespace torture
