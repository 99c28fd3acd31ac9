// `probecost replay` on what `probecost record` wrote of calls_target: its counts equal the
// summary's in both formats, its nesting is the Chrome JSON's; bad input exits 2 or 1. And
// record's status line and "wrote N events": on a terminal only, never with -q.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_capture.hpp"
#include "temp_dir.hpp"

namespace probecost::test {
namespace {

using Json = nlohmann::json;

Json read_json(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

// `probecost record -b PROBE... -o OUT --summary-json SUMMARY -- calls_target MODE N`
Result record(const std::vector<std::string>& probes, const std::string& out,
              const std::string& summary, const std::string& mode, const std::string& n) {
  std::vector<std::string> argv = {PROBECOST_BIN, "record",         "-q",   "--args", "1", "-o",
                                   out,           "--summary-json", summary};
  for (const auto& p : probes) argv.insert(argv.end(), {"-b", p});
  argv.insert(argv.end(), {"--", CALLS_TARGET, mode, n});
  return run_command(argv);
}

Json report_json(const std::string& path) {
  Result r = run_command({PROBECOST_BIN, "replay", "--report", "-f", "json", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return Json::parse(r.out);
}

void expect_counts_equal(const Json& summary, const Json& report, const std::string& what) {
  for (const auto& p : summary["probes"]) {
    auto row = std::find_if(report["functions"].begin(), report["functions"].end(),
                            [&](const Json& r) { return r["function"] == p["function"]; });
    ASSERT_NE(row, report["functions"].end()) << what << ": " << p["function"];
    EXPECT_EQ((*row)["calls"], p["calls"]) << what << " " << p["function"];
    EXPECT_EQ((*row)["returned"], p["returns"]) << what << " " << p["function"];
    EXPECT_EQ((*row)["unwound"], p["unwound"]) << what << " " << p["function"];
    EXPECT_EQ((*row)["unmatched"], p["unmatched"]) << what << " " << p["function"];
    EXPECT_EQ((*row)["orphan_returns"], p["orphan_returns"]) << what << " " << p["function"];
  }
}

TEST(ReplayRun, CountsEqualTheSummarysInBothFormats) {
  TempDir dir("probecost-replay-run");
  // Exceptions (calls that never return), nesting, and threads.
  for (auto [mode, probes] : {std::pair{"throw", std::vector<std::string>{"middle", "thrower"}},
                              {"threads", {"add3"}},
                              {"calls", {"add3", "leaf"}}}) {
    for (const std::string& out : {dir / "t.json", dir / "ctf/"}) {
      std::filesystem::remove_all(dir / "ctf");
      Result r = record(probes, out, dir / "s.json", mode, "300");
      ASSERT_EQ(r.exit_code, 0) << r.err;
      expect_counts_equal(read_json(dir / "s.json"), report_json(out), mode + (" " + out));
    }
  }
}

// The Chrome JSON's calls of one thread as a viewer nests them: by start, each inside the last
// open one whose span holds it. "name depth" per call.
std::vector<std::string> chrome_nesting(const Json& trace) {
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;  // ts, end in ns
  std::vector<std::string> names;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    auto ns = [](const Json& v) { return std::llround(v.get<double>() * 1000); };
    spans.push_back({ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])});
    names.push_back(e["name"]);
  }
  std::vector<std::size_t> order(spans.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (spans[a].first != spans[b].first) return spans[a].first < spans[b].first;
    return spans[a].second > spans[b].second;
  });
  std::vector<std::string> out;
  std::vector<std::int64_t> open_ends;
  for (std::size_t i : order) {
    while (!open_ends.empty() && spans[i].first >= open_ends.back()) open_ends.pop_back();
    out.push_back(names[i] + " " + std::to_string(open_ends.size()));
    open_ends.push_back(spans[i].second);
  }
  return out;
}

// The tree's calls, "name depth" per call as it starts ("   1.2 us [ 123] |   name(...").
std::vector<std::string> replay_nesting(const std::string& tree) {
  std::vector<std::string> out;
  std::istringstream lines(tree);
  for (std::string line; std::getline(lines, line);) {
    auto bar = line.find("] | ");
    if (line[0] == '#' || bar == std::string::npos) continue;
    std::string call = line.substr(bar + 4);
    std::size_t indent = call.find_first_not_of(' ');
    if (call[indent] == '}') continue;
    out.push_back(call.substr(indent, call.find('(') - indent) + " " + std::to_string(indent / 2));
  }
  return out;
}

TEST(ReplayRun, NestingAgreesWithTheChromeJson) {
  TempDir dir("probecost-replay-run");
  for (auto [mode, n] : {std::pair{"recurse", "40"}, {"calls", "50"}, {"tail", "50"}}) {
    std::vector<std::string> probes = {"depth", "add3", "leaf", "tail_caller"};
    Result r = record(probes, dir / "t.json", dir / "s.json", mode, n);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    Result tree = run_command({PROBECOST_BIN, "replay", dir / "t.json"});
    ASSERT_EQ(tree.exit_code, 0) << tree.err;
    auto expected = chrome_nesting(read_json(dir / "t.json"));
    EXPECT_EQ(replay_nesting(tree.out), expected) << mode << "\n" << tree.out;
    EXPECT_GT(expected.size(), 40u) << mode;
  }
}

TEST(ReplayRun, BadInputIsAClearErrorExit2Or1) {
  TempDir dir("probecost-replay-run");
  auto replay = [](std::vector<std::string> args) {
    args.insert(args.begin(), {PROBECOST_BIN, "replay"});
    return run_command(args);
  };
  Result none = replay({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("no recording"), std::string::npos) << none.err;
  Result missing = replay({dir / "nothing.json"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("nothing.json"), std::string::npos) << missing.err;
  std::ofstream(dir / "text.json") << "not json at all\n";
  Result text = replay({dir / "text.json"});
  EXPECT_EQ(text.exit_code, 2);
  EXPECT_NE(text.err.find("not a recording"), std::string::npos) << text.err;
  ASSERT_EQ(record({"add3"}, dir / "t.json", dir / "s.json", "calls", "200").exit_code, 0);
  std::filesystem::resize_file(dir / "t.json", std::filesystem::file_size(dir / "t.json") - 40);
  Result cut = replay({"--report", dir / "t.json"});
  EXPECT_EQ(cut.exit_code, 1);
  EXPECT_NE(cut.err.find("cut short"), std::string::npos) << cut.err;
  EXPECT_EQ(replay({"-f", "json", dir / "s.json"}).exit_code, 2);  // json goes with --report
  EXPECT_EQ(replay({"--time-range", "2s~1s", dir / "s.json"}).exit_code, 2);
  EXPECT_EQ(replay({dir / "t.json", dir / "s.json"}).exit_code, 2);
}

// Runs probecost with stderr on a new pseudo-terminal (stdin and stdout elsewhere, as the traced
// program's: a program drawing on the terminal gets no status line over it); returns what the
// terminal got.
std::string on_terminal(std::vector<std::string> args) {
  args.insert(args.begin(), PROBECOST_BIN);
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  EXPECT_GE(master, 0);
  EXPECT_EQ(::grantpt(master), 0);
  EXPECT_EQ(::unlockpt(master), 0);
  int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
  EXPECT_GE(slave, 0);
  MemFile out;
  pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(out.fd, 1);
    ::dup2(slave, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(slave);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) text.append(buf, n);  // EIO: done
  wait_child(pid);
  ::close(master);
  return text;
}

// spin 500 x 8M TSC ticks: at least 1 s on a TSC of up to 4 GHz, however loaded the machine.
TEST(RecordStatus, OnATerminalAStatusLineAndWhatWasWritten) {
  TempDir dir("probecost-record-status");
  std::vector<std::string> args = {"record", "-b",         "spin", "-o",  dir / "t.json",
                                   "--",     CALLS_TARGET, "spin", "500", "8000000"};
  std::string term = on_terminal(args);
  EXPECT_NE(term.find("probecost record: 1 s: "), std::string::npos) << term;
  EXPECT_NE(term.find(" lost"), std::string::npos) << term;
  EXPECT_NE(term.find("probecost record: wrote 1000 events ("), std::string::npos) << term;
  EXPECT_NE(term.find(" MB) to " + dir / "t.json"), std::string::npos) << term;

  args.insert(args.begin() + 1, "-q");
  std::string quiet = on_terminal(args);
  EXPECT_EQ(quiet.find("probecost record: 1 s: "), std::string::npos) << quiet;
  EXPECT_EQ(quiet.find("wrote"), std::string::npos) << quiet;

  // Off a terminal, not a byte of either.
  args.erase(args.begin() + 1);
  args.insert(args.begin(), PROBECOST_BIN);
  Result piped = run_command(args);
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.err.find("\033[K"), std::string::npos) << piped.err;
  EXPECT_EQ(piped.err.find("wrote"), std::string::npos) << piped.err;
}

}  // namespace
}  // namespace probecost::test
