// fault_suite: attacks `probecost trace` the way an adversarial user would, many times, and
// prints how often the traced process was harmed, probecost hung, the report was lost, or the
// hits were miscounted. Exit 0 only if every one of those is 0; 77 where ptrace is forbidden.
//
//   fault_suite [--long] [--seed N] [--only NAME[,NAME...]] [--cycles N] [--scale F]
//               [--bound S] [--probecost PATH] [--bin-dir DIR] [--list] [-v]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

#include "harness.hpp"
#include "scenario.hpp"
#include "text_check.hpp"

namespace {

struct Options {
  bool long_form = false;
  std::uint64_t seed = 0;
  bool seed_given = false;
  std::vector<std::string> only;
  int cycles = 0;    // 0: the scenario's count for the form
  double scale = 1;  // --scale: of the form's counts (at least 1 where there are any)
  bool list = false;
  bool verbose = false;
  fault::Config cfg;
};

struct Totals {
  int cycles = 0, faults = 0, harmed = 0, hung = 0, lost = 0, miscounted = 0, counted = 0;
  int restored = 0, restore_failed = 0;
  void add(const fault::Outcome& o) {
    ++cycles;
    faults += o.faults;
    harmed += o.harmed;
    hung += o.hung;
    lost += o.lost;
    miscounted += o.miscounted;
    counted += o.count_checked;
    restored += o.restore == fault::Outcome::Restore::Ok;
    restore_failed += o.restore == fault::Outcome::Restore::Failed;
  }
  int bad() const { return harmed + hung + lost + miscounted; }
};

[[noreturn]] void usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: fault_suite [--long] [--seed N] [--only NAME[,NAME...]] [--cycles N]\n"
               "                   [--scale F] [--bound S] [--probecost PATH] [--bin-dir DIR]\n"
               "                   [--list] [-v]\n"
               "  --long      thousands of cycles (default: the short form CTest runs)\n"
               "  --seed N    replay the random delays and choices of an earlier run\n"
               "  --only      run these scenarios (see --list)\n"
               "  --cycles N  cycles per scenario instead of the form's\n"
               "  --scale F   that fraction of the form's cycles (at least 1 where it has any)\n"
               "  --bound S   seconds past the expected end before probecost counts as hung\n"
               "              (5; 20 in a sanitizer build)\n");
  std::exit(code);
}

Options parse(int argc, char** argv) {
  Options o;
  o.cfg.bin_dir = fault::self_dir();
  o.cfg.probecost = o.cfg.bin_dir + "/probecost";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (a == "--long") {
      o.long_form = true;
    } else if (a == "--seed") {
      o.seed = std::stoull(value());
      o.seed_given = true;
    } else if (a == "--only") {
      std::stringstream ss(value());
      for (std::string s; std::getline(ss, s, ',');) {
        if (!fault::find_scenario(s)) {
          std::fprintf(stderr, "fault_suite: no scenario '%s' (see --list)\n", s.c_str());
          std::exit(2);
        }
        o.only.push_back(s);
      }
    } else if (a == "--cycles") {
      o.cycles = std::stoi(value());
    } else if (a == "--scale") {
      o.scale = std::stod(value());
      if (!(o.scale > 0 && o.scale <= 1)) {
        std::fprintf(stderr, "fault_suite: --scale takes a fraction in (0, 1]\n");
        std::exit(2);
      }
    } else if (a == "--bound") {
      o.cfg.bound = std::stod(value());
    } else if (a == "--probecost") {
      o.cfg.probecost = value();
    } else if (a == "--bin-dir") {
      o.cfg.bin_dir = value();
    } else if (a == "--list") {
      o.list = true;
    } else if (a == "-v" || a == "--verbose") {
      o.verbose = true;
    } else if (a == "-h" || a == "--help") {
      usage(0);
    } else {
      usage(2);
    }
  }
  if (!o.seed_given) o.seed = std::random_device{}();
  return o;
}

bool restore_available(const std::string& probecost) {
  fault::Child c({probecost, "restore", "--help"}, fault::SpawnFds{});
  auto status = c.wait(fault::after(30));
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

std::string row(const std::string& name, const Totals& t, bool counts) {
  char line[200];
  std::snprintf(line, sizeof line, "%-16s %7d %7d %7d %7d %7d %10s", name.c_str(), t.cycles,
                t.faults, t.harmed, t.hung, t.lost,
                counts ? std::to_string(t.miscounted).c_str() : "-");
  return line;
}

std::uint64_t scenario_seed(std::uint64_t seed, const std::string& name) {
  return seed ^ std::hash<std::string>{}(name);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse(argc, argv);
  if (opt.list) {
    for (const auto& s : fault::scenarios()) {
      std::printf("%-16s %4d/%-5d %s\n", s.name.c_str(), s.short_cycles, s.long_cycles,
                  s.what.c_str());
    }
    return 0;
  }
  if (!fault::ptrace_allowed()) {
    std::printf("fault_suite: this machine forbids ptrace; skipped\n");
    return 77;
  }
  ::signal(SIGPIPE, SIG_IGN);
  fault::become_subreaper();
  opt.cfg.restore_available = restore_available(opt.cfg.probecost);
  std::printf("fault_suite: %s form, seed %llu (replay: --seed %llu), probecost %s\n",
              opt.long_form ? "long" : "short", static_cast<unsigned long long>(opt.seed),
              static_cast<unsigned long long>(opt.seed), opt.cfg.probecost.c_str());
  std::printf("hung: not ended %.1f s past its expected end; restore: %s\n\n", opt.cfg.bound,
              opt.cfg.restore_available ? "available" : "not available");
  std::fflush(stdout);

  std::vector<std::pair<const fault::Scenario*, Totals>> results;
  std::map<std::string, Totals> by_strategy;
  for (const auto& s : fault::scenarios()) {
    if (!opt.only.empty() && std::find(opt.only.begin(), opt.only.end(), s.name) == opt.only.end())
      continue;
    std::mt19937_64 rng(scenario_seed(opt.seed, s.name));
    int n = opt.cycles ? opt.cycles : (opt.long_form ? s.long_cycles : s.short_cycles);
    // A scenario of the long form only (0 cycles in the short) stays out.
    if (!opt.cycles && opt.scale < 1 && n > 0)
      n = std::max(1, static_cast<int>(n * opt.scale + 0.5));
    Totals t;
    int shown = 0, with_problems = 0;
    for (int i = 0; i < n; ++i) {
      fault::Cycle c;
      c.index = i;
      c.strategy = fault::kStrategies[static_cast<std::size_t>(i) % fault::kStrategies.size()];
      c.rng = &rng;
      fault::Outcome o;
      try {
        o = s.run(opt.cfg, c);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fault_suite: %s #%d: the suite itself failed: %s\n", s.name.c_str(),
                     i, e.what());
        return 3;
      }
      fault::reap_orphans();
      t.add(o);
      if (!s.separate) by_strategy[c.strategy].add(o);
      bool noteworthy = !o.clean() || o.restore == fault::Outcome::Restore::Failed;
      with_problems += noteworthy;
      if (noteworthy && (opt.verbose || shown < 3)) {
        ++shown;
        std::printf("  %s #%d (%s): %s\n", s.name.c_str(), i, c.strategy.c_str(), o.why.c_str());
        std::fflush(stdout);
      }
    }
    if (shown < with_problems) {
      std::printf("  %s: %d more cycles with problems (-v shows all)\n", s.name.c_str(),
                  with_problems - shown);
    }
    results.emplace_back(&s, t);
  }

  std::printf("\n%-16s %7s %7s %7s %7s %7s %10s\n", "scenario", "cycles", "faults", "harmed",
              "hung", "lost", "miscounted");
  Totals all;
  int restore_failures = 0;
  for (const auto& [s, t] : results) {
    if (s->separate) continue;
    std::printf("%s\n", row(s->name, t, s->counts).c_str());
    all.cycles += t.cycles;
    all.faults += t.faults;
    all.harmed += t.harmed;
    all.hung += t.hung;
    all.lost += t.lost;
    all.miscounted += t.miscounted;
  }
  std::printf("%s\n", row("all", all, true).c_str());
  std::printf("\nby strategy (int3 --step-over, or jump):\n");
  for (const auto& name : fault::kStrategies) {
    if (by_strategy.count(name)) std::printf("%s\n", row(name, by_strategy[name], true).c_str());
  }
  for (const auto& [s, t] : results) {
    if (!s->separate) continue;
    std::printf("\n%s (reported apart, not in the verdict):\n%s", s->what.c_str(),
                row(s->name, t, false).c_str());
    if (opt.cfg.restore_available) {
      std::printf("   restore: %d ok, %d failed\n", t.restored, t.restore_failed);
      restore_failures += t.restore_failed;
    } else {
      std::printf("   restore: probecost has no 'restore' command yet\n");
    }
  }
  auto& window = fault::handler_window_ms();
  if (!window.empty()) {
    std::sort(window.begin(), window.end());
    std::printf(
        "\nprobecost caught SIGINT/SIGTERM/SIGHUP %.1f ms after its fork (median; max "
        "%.1f ms): the dynamic loader's time, before which no program can\n",
        window[window.size() / 2], window.back());
  }
  if (std::size_t foreign = fault::foreign_int3s()) {
    std::printf(
        "\n%zu differing byte(s) left out: the harness's own copy of the library showed them "
        "too (a kernel uprobe elsewhere on the machine, not probecost's)\n",
        foreign);
  }
  bool pass = all.bad() == 0 && restore_failures == 0;
  std::printf(
      "\nfault_suite: %s: %d cycles, %d faults, %d harmed, %d hung, %d lost, %d "
      "miscounted (seed %llu)\n",
      pass ? "PASS" : "FAIL", all.cycles, all.faults, all.harmed, all.hung, all.lost,
      all.miscounted, static_cast<unsigned long long>(opt.seed));
  return pass ? 0 : 1;
}
