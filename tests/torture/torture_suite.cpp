// torture_suite: the relocation torture suite of issue 15. For each corpus program it probes
// every instruction boundary of every t_* function, one at a time and all at once, with int3
// and each step-over strategy, with jumps and with auto; each run's output and exit status must
// equal the untraced run's, and each probe's hits the kernel uprobe's at the same site. A
// refusal with a reason is fine; a hang, a crash, a wrong output or a wrong count is a failure.
// With --main (a probecost built from main before issue 15's fixes), the failures issue 15 lists
// are listed apart ("known"); any other failure fails the suite. Exit 0 when there is none, 1
// otherwise, 77 where ptrace is forbidden.
//
//   torture_suite [--long] [--only PROG,...] [--ways WAY,...] [--function NAME] [--offsets N,...]
//                 [--stride N] [--main] [--timeout S] [--probecost PATH] [--corpus DIR] [--list]
//                 [-v]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "known.hpp"
#include "proc.hpp"
#include "scenario.hpp"
#include "suite.hpp"

namespace {

using torture::Verdict;

struct Options {
  bool long_form = false, list = false, verbose = false, main_known = false;
  std::set<std::string> only, only_ways;
  std::string function;
  std::set<std::string> offsets;  // with --function: only these boundaries (offsets)
  std::size_t stride = 0;         // 0: the form's (1 long, 12 short)
  torture::Config cfg;
};

struct Totals {
  int runs = 0, refused = 0, failed = 0, known = 0;
  std::size_t probes = 0, counts = 0;
  void add(const Verdict& v) {
    ++runs;
    probes += v.probes;
    counts += v.counts_checked;
    refused += v.kind == Verdict::Kind::Refused;
    failed += v.kind == Verdict::Kind::Failed && !v.known_item;
    known += v.kind == Verdict::Kind::Failed && v.known_item;
  }
};

std::set<std::string> split(const std::string& s) {
  std::set<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.insert(item);
  return out;
}

[[noreturn]] void usage(int code) {
  std::fprintf(
      code ? stderr : stdout,
      "usage: torture_suite [--long] [--only PROG,...] [--ways WAY,...] [--function NAME]\n"
      "                     [--offsets N,...] [--stride N] [--main] [--timeout S]\n"
      "                     [--probecost PATH] [--corpus DIR] [--list] [-v]\n"
      "  --long      every program and every boundary (default: the short form)\n"
      "  --only      these programs (see --list)\n"
      "  --ways      these ways: int3/singlestep int3/emulate int3/outline int3/auto jump auto\n"
      "              record\n"
      "  --function  that function only; --offsets: only those boundaries of it\n"
      "  --stride N  probe one boundary in N of each function, one at a time\n"
      "  --main      probecost is main's before issue 15's fixes: list its failures apart\n");
  std::exit(code);
}

Options parse(int argc, char** argv) {
  Options o;
  std::string dir = fault::self_dir();
  o.cfg.probecost = dir + "/probecost";
  o.cfg.corpus_dir = dir + "/torture";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (a == "--long")
      o.long_form = true;
    else if (a == "--only")
      o.only = split(value());
    else if (a == "--ways")
      o.only_ways = split(value());
    else if (a == "--function")
      o.function = value();
    else if (a == "--offsets")
      o.offsets = split(value());
    else if (a == "--stride")
      o.stride = std::stoul(value());
    else if (a == "--main")
      o.main_known = true;
    else if (a == "--timeout")
      o.cfg.timeout = std::stod(value());
    else if (a == "--probecost")
      o.cfg.probecost = value();
    else if (a == "--corpus")
      o.cfg.corpus_dir = value();
    else if (a == "--list")
      o.list = true;
    else if (a == "-v")
      o.verbose = true;
    else if (a == "-h" || a == "--help")
      usage(0);
    else
      usage(2);
  }
  if (o.stride == 0) o.stride = o.long_form ? 1 : 12;
  return o;
}

bool selected(const Options& o, const torture::Program& p) {
  if (!o.only.empty()) return o.only.count(p.name) > 0;
  return o.long_form || p.in_short_form;
}

// Only the boundaries at `offsets` (decimal, from the function's start).
void keep_offsets(torture::Function& f, const std::set<std::string>& offsets) {
  torture::Function kept = f;
  kept.boundaries.clear();
  kept.texts.clear();
  kept.uncounted.clear();
  for (std::size_t b = 0; b < f.boundaries.size(); ++b) {
    if (!offsets.count(std::to_string(f.boundaries[b]))) continue;
    kept.boundaries.push_back(f.boundaries[b]);
    kept.texts.push_back(f.texts[b]);
    kept.uncounted.push_back(f.uncounted[b]);
  }
  f = std::move(kept);
}

// The boundaries probed one at a time: one in `stride`, a different one for each function.
std::vector<std::size_t> sampled(const torture::Function& f, std::size_t stride) {
  std::vector<std::size_t> out;
  std::size_t phase = std::hash<std::string>{}(f.name) % stride;
  for (std::size_t b = 0; b < f.boundaries.size(); ++b) {
    if (b % stride == phase) out.push_back(b);
  }
  return out;
}

std::vector<torture::Function> functions(const Options& o, const torture::Program& p) {
  std::vector<torture::Function> out;
  for (auto& f : torture::functions_of(o.cfg.corpus_dir + "/torture_" + p.name)) {
    if (!o.function.empty() && f.name != o.function) continue;
    if (!o.offsets.empty()) keep_offsets(f, o.offsets);
    if (!f.skipped.empty()) {
      std::printf("%s: %s not probed: %s\n", p.name.c_str(), f.name.c_str(), f.skipped.c_str());
      continue;
    }
    out.push_back(std::move(f));
  }
  return out;
}

// The program's functions, its untraced run, and the kernel uprobe's count at the sites where
// the kernel is a reference: all of them in the long form, those probed one at a time in the
// short form (removing a uprobe takes the kernel ~0.1 s). Empty `harm` unless the kernel's
// uprobes themselves changed what the program does.
torture::Subject prepare(const Options& o, const torture::Program& p, std::string& harm) {
  torture::Subject s;
  s.program = &p;
  s.functions = functions(o, p);
  std::vector<std::uint64_t> offsets;
  std::vector<std::pair<std::size_t, std::size_t>> where;
  for (std::size_t fi = 0; fi < s.functions.size(); ++fi) {
    const auto& f = s.functions[fi];
    s.counts.emplace_back(f.boundaries.size());
    for (std::size_t b : sampled(f, o.long_form ? 1 : o.stride)) {
      if (!f.uncounted[b].empty() || b == 0) continue;
      offsets.push_back(f.file_offset + f.boundaries[b]);
      where.emplace_back(fi, b);
    }
  }
  // Every function's entry: where record's calls are counted.
  for (std::size_t fi = 0; fi < s.functions.size(); ++fi) {
    const auto& f = s.functions[fi];
    if (f.boundaries.empty() || !f.uncounted[0].empty()) continue;
    offsets.push_back(f.file_offset + f.boundaries[0]);
    where.emplace_back(fi, 0);
  }
  s.untraced = torture::run_reference(o.cfg, p, {});
  torture::Reference counted = torture::run_reference(o.cfg, p, offsets);
  if (!counted.uprobe_skipped.empty()) {
    std::printf("%s: counts not checked: %s\n", p.name.c_str(), counted.uprobe_skipped.c_str());
  } else if (counted.code != s.untraced.code || counted.out != s.untraced.out) {
    harm = p.name + ": the kernel's uprobes at " + std::to_string(offsets.size()) +
           " sites changed what the program does (exit " +
           std::to_string(counted.code.value_or(-1)) + ", output '" + counted.out +
           "'): its counts are not checked";
  } else {
    for (std::size_t i = 0; i < where.size(); ++i)
      s.counts[where[i].first][where[i].second] = counted.counts.at(i);
  }
  return s;
}

struct Suite {
  const Options& o;
  std::map<std::string, Totals> by_way;
  Totals all;
  std::map<int, std::vector<std::string>> known;
  std::vector<std::string> failures;
  std::vector<std::string> kernel_harm;  // the kernel's uprobes changed a program
  std::map<std::string, int> uncounted;  // sites the kernel's uprobe is no reference for, by why

  void record(const torture::Case& c, Verdict v) {
    if (!o.main_known) v.known_item = 0;
    by_way[c.way->name].add(v);
    all.add(v);
    std::string where = c.subject->program->name + " " +
                        (c.all_at_once ? c.function->name + " (all " +
                                             std::to_string(c.boundaries.size()) + " boundaries)"
                                       : torture::spec_of(*c.function, c.boundaries[0]) + " '" +
                                             c.function->texts[c.boundaries[0]] + "'") +
                        " " + c.way->name;
    if (v.kind == Verdict::Kind::Failed) {
      std::string line = where + ": " + v.why + "\n    " + v.reproducer;
      if (v.known_item) {
        known[v.known_item].push_back(line);
        if (o.verbose) std::printf("KNOWN (item %d) %s\n", v.known_item, line.c_str());
      } else {
        failures.push_back(line);
        std::printf("FAIL %s\n", line.c_str());
      }
    } else if (o.verbose || (c.way->record && !v.why.empty())) {  // record's unmatched calls
      std::printf("%s %s%s%s\n", v.kind == Verdict::Kind::Refused ? "refused" : "ok", where.c_str(),
                  v.why.empty() ? "" : ": ", v.why.c_str());
    }
    std::fflush(stdout);
  }

  void run_function(const torture::Subject& s, std::size_t fi) {
    const torture::Function& f = s.functions[fi];
    for (const auto& way : torture::ways()) {
      if (!o.only_ways.empty() && !o.only_ways.count(way.name)) continue;
      torture::Case c{&s, &f, fi, {}, &way, false};
      if (way.record) {
        c.boundaries = {0};  // the function: its entry and its returns
        record(c, torture::run_case(o.cfg, c));
        continue;
      }
      if (way.singles) {
        for (std::size_t b : sampled(f, o.stride)) {
          c.boundaries = {b};
          record(c, torture::run_case(o.cfg, c));
        }
      }
      if (!o.long_form && !way.all_in_short) continue;
      c.all_at_once = true;
      c.boundaries.clear();
      for (std::size_t b = 0; b < f.boundaries.size(); ++b) c.boundaries.push_back(b);
      record(c, torture::run_case(o.cfg, c));
    }
  }

  void run_program(const torture::Program& p) {
    std::string harm;
    torture::Subject s = prepare(o, p, harm);
    const auto& ref = s.untraced;
    if (o.verbose) {
      std::printf("%s: untraced: exit %d, output:\n%s", p.name.c_str(), ref.code.value_or(-1),
                  ref.out.c_str());
    }
    if (!harm.empty()) {
      kernel_harm.push_back(harm);
      std::printf("KERNEL %s\n", harm.c_str());
    }
    if (!ref.code || *ref.code != 0) {
      failures.push_back(p.name + ": the untraced run did not exit 0 (" + ref.err + ")");
      std::printf("FAIL %s\n", failures.back().c_str());
      return;
    }
    for (const auto& f : s.functions) {
      for (const auto& why : f.uncounted) {
        if (!why.empty()) ++uncounted[why];
      }
    }
    for (std::size_t fi = 0; fi < s.functions.size(); ++fi) run_function(s, fi);
  }
};

void print_totals(const Suite& s) {
  std::printf("\n%-16s %7s %8s %8s %8s %8s %8s\n", "way", "runs", "probes", "counts", "refused",
              "known", "failures");
  auto row = [](const std::string& name, const Totals& t) {
    std::printf("%-16s %7d %8zu %8zu %8d %8d %8d\n", name.c_str(), t.runs, t.probes, t.counts,
                t.refused, t.known, t.failed);
  };
  for (const auto& way : torture::ways()) {
    auto it = s.by_way.find(way.name);
    if (it != s.by_way.end()) row(way.name, it->second);
  }
  row("all", s.all);
  for (const auto& [item, lines] : s.known) {
    std::printf("\nknown on main, %s: %zu runs, e.g.\n  %s\n",
                torture::known_description(item).c_str(), lines.size(), lines.front().c_str());
  }
  if (!s.uncounted.empty()) std::printf("\nsites whose hits are not compared with the kernel's:\n");
  for (const auto& [why, n] : s.uncounted) std::printf("  %5d  %s\n", n, why.c_str());
  for (const auto& h : s.kernel_harm) std::printf("\nKERNEL %s\n", h.c_str());
  for (const auto& f : s.failures) std::printf("\nFAIL %s\n", f.c_str());
}

void list(const Options& o) {
  for (const auto& p : torture::programs()) {
    if (!selected(o, p)) continue;
    std::size_t n = 0;
    auto fns = torture::functions_of(o.cfg.corpus_dir + "/torture_" + p.name);
    for (const auto& f : fns) n += f.boundaries.size();
    std::printf("%-16s %s %3zu functions %5zu boundaries\n", p.name.c_str(),
                p.attach ? "attached" : "launched", fns.size(), n);
    if (o.verbose) {
      for (const auto& f : fns) std::printf("  %-24s %3zu\n", f.name.c_str(), f.boundaries.size());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.list) {
    list(o);
    return 0;
  }
  if (!fault::ptrace_allowed()) {
    std::printf("torture_suite: skipped: this machine does not let us ptrace a child\n");
    return 77;
  }
  auto start = std::chrono::steady_clock::now();
  Suite s{o, {}, {}, {}, {}, {}, {}};
  for (const auto& p : torture::programs()) {
    if (selected(o, p)) s.run_program(p);
  }
  torture::wait_for_uprobe_removal();
  print_totals(s);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "\ntorture_suite: %s: %d runs, %zu probes, %zu counts checked, %d refused, %zu known "
      "on main, %zu failures (%s form, %.0f s)\n",
      s.failures.empty() ? "PASS" : "FAIL", s.all.runs, s.all.probes, s.all.counts, s.all.refused,
      static_cast<std::size_t>(s.all.known), s.failures.size(), o.long_form ? "long" : "short",
      secs);
  return s.failures.empty() ? 0 : 1;
}
