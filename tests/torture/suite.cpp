#include "suite.hpp"

#include <map>
#include <sstream>

#include "known.hpp"
#include "proc.hpp"

namespace torture {

const std::vector<Way>& ways() {
  static const std::vector<Way> all = {
      {"int3/singlestep", {"--via", "int3", "--step-over", "singlestep"}, true, false},
      {"int3/emulate", {"--via", "int3", "--step-over", "emulate"}, true, false},
      {"int3/outline", {"--via", "int3", "--step-over", "outline"}, true},
      {"int3/auto", {"--via", "int3", "--step-over", "auto"}, true},
      {"jump", {"--via", "jump"}, true},
      // Per site, auto is jump where jump goes and int3/auto elsewhere: only its mix of the
      // two, with every boundary of a function probed at once, is new.
      {"auto", {"--via", "auto"}, false},
      {"record", {"record"}, false, true, true},
  };
  return all;
}

std::string spec_of(const Function& f, std::size_t b) {
  return f.name + "+" + std::to_string(f.boundaries[b]);
}

namespace {

using fault::last_line;

// Hits per spec, summed over the report's rows (one per image: a program that execs itself
// has two); a row of several specs at one address counts for each.
std::map<std::string, std::uint64_t> hits_by_spec(const nlohmann::json& report) {
  std::map<std::string, std::uint64_t> hits;
  for (const auto& row : report.value("probes", nlohmann::json::array())) {
    std::string specs = row.value("spec", "");
    std::uint64_t n = row.value("hits", std::uint64_t{0});
    std::size_t start = 0;
    for (;;) {
      auto comma = specs.find(", ", start);
      hits[specs.substr(start, comma - start)] += n;
      if (comma == std::string::npos) break;
      start = comma + 2;
    }
  }
  return hits;
}

void check_counts(const Case& c, const nlohmann::json& report, Verdict& v) {
  auto hits = hits_by_spec(report);
  std::ostringstream wrong;
  for (std::size_t b : c.boundaries) {
    auto expected = c.subject->counts.at(c.fn_index).at(b);
    if (!expected) continue;
    std::string spec = spec_of(*c.function, b);
    std::uint64_t got = hits.count(spec) ? hits[spec] : 0;
    ++v.counts_checked;
    if (got != *expected) {
      wrong << (wrong.tellp() ? ", " : "") << spec << " ('" << c.function->texts[b] << "'): " << got
            << " hits, the kernel's uprobe " << *expected;
    }
  }
  if (wrong.tellp()) {
    v.kind = Verdict::Kind::Failed;
    v.why = "wrong count: " + wrong.str();
  }
}

// The program must not notice: same output, same exit status as untraced.
bool same_as_untraced(const Ended& ref, const Ended& e, Verdict& v) {
  if (!e.code) {
    v.why = "the program did not end (hung)";
  } else if (*e.code != *ref.code) {
    v.why = "the program exited " + std::to_string(*e.code) + ", untraced " +
            std::to_string(*ref.code) + " (stderr: " + last_line(e.err) + ")";
  } else if (e.out != ref.out) {
    v.why = "its output differs from the untraced run's: '" + last_line(e.out) + "'";
  } else {
    return true;
  }
  v.kind = Verdict::Kind::Failed;
  return false;
}

// What one row of record's summary says wrong of the function's calls: nothing lost, and no
// return with no entry, but in an attached program (a call under way when the attach came: a
// parked program waits inside its function). A call whose return record does not see (thrown
// through, longjmp'd out of, or returning from the function's .cold part, whose returns are
// not patched) is closed unmatched by its caller's return: said in `note`, not a failure.
void check_pairs(const Case& c, const nlohmann::json& row, std::ostringstream& wrong,
                 std::string& note) {
  auto n = [&](const char* k) { return row.value(k, std::uint64_t{0}); };
  if (n("events_lost")) wrong << "events_lost " << n("events_lost") << "; ";
  if (n("orphan_returns") && !c.subject->program->attach)
    wrong << "orphan_returns " << n("orphan_returns") << "; ";
  auto ended = n("returns") + n("unwound") + n("open_at_end") + n("unmatched");
  if (ended != n("calls") && !n("unmatched"))
    wrong << n("calls") << " calls but " << ended << " returned, unwound or open; ";
  if (n("unmatched")) {
    // Their pairing is record's (record/pairing.hpp), being reworked: its figures are said.
    note = std::to_string(n("unmatched")) + " of " + std::to_string(n("calls")) +
           " calls unmatched (no return seen" +
           (c.function->has_cold_part ? ": part of it is in " + c.function->name + ".cold" : "") +
           "), " + std::to_string(n("returns")) + " returned";
  }
}

// record's summary: the function's calls against the kernel's hits at its entry.
void check_calls(const Case& c, const nlohmann::json& summary, Verdict& v) {
  std::ostringstream wrong;
  std::string note;
  for (const auto& row : summary.value("probes", nlohmann::json::array())) {
    if (row.value("function", "") != c.function->name) continue;
    auto calls = row.value("calls", std::uint64_t{0});
    auto expected = c.subject->counts.at(c.fn_index).at(0);
    if (expected) {
      ++v.counts_checked;
      if (calls != *expected) wrong << calls << " calls, the kernel's uprobe " << *expected << "; ";
    }
    check_pairs(c, row, wrong, note);
  }
  if (!v.counts_checked && c.subject->counts.at(c.fn_index).at(0)) wrong << "no row for it; ";
  if (wrong.tellp()) {
    v.kind = Verdict::Kind::Failed;
    v.why = "wrong record: " + wrong.str() + note;
  } else {
    v.why = note;
  }
}

std::vector<std::string> probe_args(const Case& c) {
  std::vector<std::string> args = c.way->args;
  if (c.way->record) {
    args.insert(args.end(), {"-b", c.function->name});
    return args;
  }
  for (std::size_t b : c.boundaries) args.insert(args.end(), {"-b", spec_of(*c.function, b)});
  return args;
}

}  // namespace

Verdict run_case(const Config& cfg, const Case& c) {
  Verdict v;
  v.probes = c.boundaries.size();
  Traced t = run_traced(cfg, *c.subject->program, probe_args(c));
  v.reproducer = shell_line(t.argv);
  const Program& p = *c.subject->program;
  if (!t.probecost_code) {
    v.kind = Verdict::Kind::Failed;
    v.why = "probecost hung (killed after " + std::to_string(static_cast<int>(cfg.timeout)) + " s)";
  } else if (*t.probecost_code == 2 && !t.report) {
    // A refusal: the probes named are not for this way. An attached program runs on as it
    // would have; a launched one was never let run.
    v.kind = Verdict::Kind::Refused;
    v.why = last_line(t.probecost_err);
    if (p.attach) same_as_untraced(c.subject->untraced, t.target, v);
  } else if (!t.report) {
    v.kind = Verdict::Kind::Failed;
    v.why = "no report (probecost exited " + std::to_string(*t.probecost_code) +
            "): " + last_line(t.probecost_err);
  } else if (same_as_untraced(c.subject->untraced, t.target, v)) {
    if (c.way->record)
      check_calls(c, *t.report, v);
    else
      check_counts(c, *t.report, v);
  }
  if (v.kind == Verdict::Kind::Failed) v.known_item = known_item(c, v.why);
  return v;
}

}  // namespace torture
