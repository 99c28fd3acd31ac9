#pragma once
// The fault-injection scenarios: each attacks `probecost trace` one way, one cycle at a time,
// and says whether the cycle harmed the target, hung, lost the report or miscounted.
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace fault {

// Seconds past the expected end before probecost counts as hung. The sanitizer build's
// probecost is much slower at what a cycle asks of it after its probes are in: detaching from
// fault_busy's 33 threads (--via jump) took 0.9-1.2 s there against ~30 ms in Release (quiet
// machine, -O0 build), and on CI's 2 vCPUs one such cycle was still running 5 s past its end.
#ifdef PROBECOST_SANITIZED
inline constexpr double kHungBound = 20;
#else
inline constexpr double kHungBound = 5;
#endif

struct Config {
  std::string probecost;           // path of probecost
  std::string bin_dir;             // where the fault_* targets are
  double bound = kHungBound;       // seconds past the expected end before probecost counts as hung
  bool restore_available = false;  // `probecost restore` exists
  // Seconds from probecost's fork to its "tracing process" line. Not what a cycle tests, and
  // slow in a sanitizer build: its 160 MB binary takes up to 6 s to load and print --help at
  // load 15 on 2 cores (0.44 s of CPU), and the attach as long again.
  double start_bound = 15;
};

struct Outcome {
  bool harmed = false, hung = false, lost = false, miscounted = false;
  bool count_checked = false;  // the target knew the exact number of calls to count
  int faults = 1;              // faults injected (signals sent, exits, forks, ...)
  enum class Restore { NotRun, Ok, Failed } restore = Restore::NotRun;
  std::string why;  // what went wrong, one clause per problem

  void harm(const std::string& w) { note(harmed, "harmed: " + w); }
  void hang(const std::string& w) { note(hung, "hung: " + w); }
  void lose(const std::string& w) { note(lost, "report lost: " + w); }
  void miscount(const std::string& w) { note(miscounted, "miscounted: " + w); }
  bool clean() const { return !harmed && !hung && !lost && !miscounted; }

 private:
  void note(bool& flag, const std::string& w) {
    flag = true;
    why += (why.empty() ? "" : "; ") + w;
  }
};

// What one cycle is given.
struct Cycle {
  int index = 0;
  std::string strategy = "auto";  // --step-over with --via int3, or "jump": --via jump
  std::mt19937_64* rng = nullptr;
  double uniform(double lo, double hi) const {
    return std::uniform_real_distribution<double>(lo, hi)(*rng);
  }
  std::uint64_t below(std::uint64_t n) const { return (*rng)() % n; }
};

struct Scenario {
  std::string name;
  std::string what;
  int short_cycles = 0, long_cycles = 0;
  bool counts = false;    // checks hits against the target's exact count
  bool separate = false;  // reported on its own line, not in the verdict (SIGKILL of probecost)
  std::function<Outcome(const Config&, const Cycle&)> run;
};

const std::vector<Scenario>& scenarios();
const Scenario* find_scenario(const std::string& name);
extern const std::vector<std::string> kStrategies;

// True when this machine lets us trace a child of ours (PTRACE_SEIZE).
bool ptrace_allowed();

}  // namespace fault
