// The short-functions scenario (issue 23 item 1): `probecost record` of fault_short's functions
// of 1 to 4 bytes (one ending at a page's end) beside probe_fn, launched and attached. Record
// plans its own probes (a jump where one fits, an int3 elsewhere), whatever the cycle's way of
// probing. Nobody may die or see a stray trap, every result must be right, the text the files'
// after detach, and the counts exact where the calls are known.
#include <signal.h>

#include <fstream>

#include "cycles.hpp"
#include "harness.hpp"
#include "temp_dir.hpp"
#include "traced.hpp"

namespace fault {

namespace {

constexpr unsigned kThreads = 2;
constexpr std::uint64_t kRound = 100;  // calls of every function per thread
const char* const kShortFns[] = {"short_ret1", "short_xchg2", "short_tail2",
                                 "short_mov3", "short_lea4",  "short_page_end"};

// A running `probecost record -o DIR/t.json --summary-json DIR/s.json ARGS`, its stderr on a
// pipe; `in` and `ctl` as for TraceRun (a launched target's stdin and fd 3).
class RecordRun {
 public:
  RecordRun(const Config& cfg, const std::vector<std::string>& args, int in = -1, int ctl = -1)
      : lines_(err_.read) {
    std::vector<std::string> argv = {cfg.probecost,   "record",         "-o",
                                     dir_ / "t.json", "--summary-json", dir_ / "s.json"};
    for (const char* fn : kShortFns) argv.insert(argv.end(), {"-b", fn});
    argv.insert(argv.end(), {"-b", "probe_fn"});
    argv.insert(argv.end(), args.begin(), args.end());
    SpawnFds fds;
    fds.in = in;
    fds.err = err_.write;
    fds.ctl = ctl;
    child_ = Child(argv, fds);
    err_.close_write();
  }
  bool wait_recording(Deadline deadline) {
    while (auto line = lines_.next(deadline)) {
      if (line->find("tracing process") != std::string::npos) return true;
    }
    return false;
  }
  void signal(int sig) { child_.signal(sig); }
  // Its end by `deadline` (else a hang: SIGINT, then SIGKILL); exit 0 and the summary, or lost.
  std::optional<nlohmann::json> finish(Deadline deadline, Outcome& o, const std::string& what) {
    auto status = child_.wait(deadline);
    if (!status) {
      child_.signal(SIGINT);
      if (!child_.wait(after(1))) child_.kill();
      o.hang("probecost record still running " + what);
      return std::nullopt;
    }
    while (lines_.next(after(0.05))) {
    }
    if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
      o.lose("probecost record " + describe_status(*status) + ": " + last_line(lines_.seen()));
      return std::nullopt;
    }
    std::ifstream in(dir_ / "s.json");
    try {
      return nlohmann::json::parse(in);
    } catch (const std::exception&) {
      o.lose("probecost record exited 0 without a summary");
      return std::nullopt;
    }
  }

 private:
  probecost::test::TempDir dir_{"fault-short"};  // before the child: its files are in it
  Pipe err_;
  LineReader lines_;
  Child child_;
};

// Every function's calls and returns in the summary against a known round: `threads` threads
// calling every function `calls` times (short_lea4 twice: short_tail2 jumps into it).
void check_calls(const nlohmann::json& summary, std::uint64_t calls, Outcome& o) {
  o.count_checked = true;
  const nlohmann::json probes = summary.value("probes", nlohmann::json::array());
  for (const auto& p : probes) {
    std::string fn = p.value("function", "");
    std::uint64_t want = kThreads * calls * (fn == "short_lea4" ? 2 : 1);
    auto got = p.value("calls", std::uint64_t{0}), back = p.value("returns", std::uint64_t{0});
    if (got != want || back != want || p.value("unmatched", 0) != 0)
      o.miscount(fn + ": " + std::to_string(got) + " calls, " + std::to_string(back) +
                 " returns recorded, " + std::to_string(want) + " made");
  }
  if (probes.size() != std::size(kShortFns) + 1)
    o.miscount("the summary has " + std::to_string(probes.size()) + " probes");
}

// Launched: each thread calls every function kRound times; the command's end is checked.
Outcome launched(const Config& cfg) {
  Outcome o;
  TargetPipes t;
  RecordRun run(
      cfg, {"--", cfg.bin_dir + "/fault_short", "--calls", std::to_string(kRound), "--ctl-fd", "3"},
      t.in.read, t.ctl.write);
  t.in.close_read();
  t.ctl.close_write();
  auto summary = run.finish(after(6 * cfg.bound), o, after_text(cfg, "the command's start"));
  if (!t.wait_ready(after(cfg.bound))) o.harm("the launched target never said ready");
  auto end = read_end(t, after(cfg.bound), o);
  if (end) {
    check_end(*end, o);
  } else {
    o.harm("the launched target ended without its end line");
  }
  if (summary) check_calls(*summary, kRound, o);
  return o;
}

// Attached while idle: a known round while recorded, then SIGINT; or attached while the
// threads call without pause, for a random --duration. Then the text and the end checked.
Outcome attached(const Config& cfg, const Cycle& c, bool busy) {
  Outcome o;
  auto t =
      busy ? start_target(cfg, {"fault_short", "--threads", std::to_string(kThreads)})
           : start_target(cfg, {"fault_short", "--idle", "--threads", std::to_string(kThreads)});
  std::vector<std::string> args = {"-p", std::to_string(t->pid)};
  double d = c.uniform(0.01, 0.2);
  if (busy) args.insert(args.end(), {"--duration", fmt_seconds(d)});
  RecordRun run(cfg, args);
  if (!run.wait_recording(after(2 * cfg.bound))) {
    o.lose("probecost record never started recording");
  } else if (!busy) {
    t->send("go " + std::to_string(kRound));
    if (!t->wait_line("done", after(6 * cfg.bound))) o.harm("the round of calls did not finish");
    run.signal(SIGINT);
  }
  auto summary = run.finish(after(d + 2 * cfg.bound), o, after_text(cfg, "its end"));
  if (summary && !busy) check_calls(*summary, kRound, o);
  check_text(t->pid, o, "after detach");
  stop_and_check(*t, cfg, o);
  return o;
}

}  // namespace

Outcome short_record_cycle(const Config& cfg, const Cycle& c, int variant) {
  switch (variant) {
    case 0:
      return launched(cfg);
    case 1:
      return attached(cfg, c, false);
    default:
      return attached(cfg, c, true);
  }
}

}  // namespace fault
