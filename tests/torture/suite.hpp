#pragma once
// One probed run of the torture suite and its verdict: the program's output and exit status
// against the untraced run's, each probe's hits against the kernel uprobe's at the same site;
// and the failures issue 15 lists as broken on main, recognised and listed apart.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "corpus.hpp"
#include "runner.hpp"

namespace torture {

// A way of probing: the arguments after `probecost trace`.
struct Way {
  std::string name;
  std::vector<std::string> args;
  bool singles = true;  // a run per instruction boundary; else only the all-at-once run
  // The all-at-once run in the short form too (singlestep and emulate, slow, only in the long).
  bool all_in_short = true;
  // `probecost record` of the whole function (its calls at its entry and their returns): one
  // run per function, its calls against the kernel uprobe's hits at the function's first byte.
  bool record = false;
};
const std::vector<Way>& ways();

// A program, its untraced run, and the kernel uprobe's count at its sites.
struct Subject {
  const Program* program = nullptr;
  std::vector<Function> functions;
  Ended untraced;  // what every probed run must do too: output and exit status
  // Per function and boundary, the kernel uprobe's hits; nothing where the kernel is no
  // reference (Function::uncounted) or the site was not counted (the short form counts only
  // the boundaries it probes one at a time).
  std::vector<std::vector<std::optional<std::uint64_t>>> counts;
};

// One probecost run: the probes of one function (one boundary, or all of them) one way.
struct Case {
  const Subject* subject = nullptr;
  const Function* function = nullptr;
  std::size_t fn_index = 0;
  std::vector<std::size_t> boundaries;  // indices into function->boundaries
  const Way* way = nullptr;
  bool all_at_once = false;
};

struct Verdict {
  enum class Kind { Passed, Refused, Failed } kind = Kind::Passed;
  std::string why;         // the refusal's reason, or what went wrong
  std::string reproducer;  // the command line
  int known_item = 0;      // a failure issue 15 lists as broken on main: its item number
  std::size_t probes = 0;
  std::size_t counts_checked = 0;
};

Verdict run_case(const Config& cfg, const Case& c);

// The spec of a probe at boundary `b` of `f`: NAME+OFFSET.
std::string spec_of(const Function& f, std::size_t b);

}  // namespace torture
