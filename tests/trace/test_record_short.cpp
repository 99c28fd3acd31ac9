// Issue 23 item 1: functions shorter than a jump (1 to 4 bytes, one ending at a page's end, one
// at the end of the executable mapping; short_target), each beside big, which takes jumps.
// `record` gives each an int3 for its entry and exit and records every call exactly, launched and
// attached; `trace --via jump` refuses it with the reason, touching nothing; `trace` counts it
// with an int3. The program's output is the untraced one's, its bytes its file's afterwards.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "run_capture.hpp"
#include "temp_dir.hpp"
#include "trace_harness.hpp"

namespace probecost::test {
namespace {

constexpr long kCalls = 300;

// What the program says it did, by function: calls, and the sum of what they returned (none
// for a tail call, whose exit sees no result of its own).
struct Said {
  long calls = 0;
  std::optional<long> sum;
};

std::map<std::string, Said> parse_round(const std::string& line) {
  std::map<std::string, Said> out;
  std::istringstream in(line);
  for (std::string tok; in >> tok;) {
    auto a = tok.find(':'), b = tok.rfind(':');
    Said s{std::stol(tok.substr(a + 1, b - a - 1)), std::nullopt};
    if (tok.substr(b + 1) != "-") s.sum = std::stol(tok.substr(b + 1));
    out[tok.substr(0, a)] = s;
  }
  return out;
}

Json read_json(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

const Json& probe_named(const Json& probes, const std::string& key, const std::string& name) {
  for (const auto& p : probes) {
    if (p.value(key, "") == name) return p;
  }
  static const Json none = Json::object();
  ADD_FAILURE() << "no probe " << name << " in " << probes.dump();
  return none;
}

// The recording's calls of `fn` against what the program said: exact counts, every call
// returned, and the returns' sum its own.
void expect_recorded(const TempDir& dir, const std::map<std::string, Said>& said,
                     const std::string& fn) {
  SCOPED_TRACE(fn);
  const Json summary = read_json(dir / "s.json");
  const Json& p = probe_named(summary["probes"], "function", fn);
  const Said& s = said.at(fn);
  EXPECT_EQ(p.value("calls", -1L), s.calls) << p.dump();
  EXPECT_EQ(p.value("returns", -1L), s.calls) << p.dump();
  EXPECT_EQ(p.value("unmatched", -1L), 0) << p.dump();
  EXPECT_EQ(p.value("events_lost", -1L), 0) << p.dump();
  long n = 0, sum = 0;
  const Json trace = read_json(dir / "t.json");
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e.value("name", "") != fn) continue;
    ++n;
    sum += e["args"]["ret"].get<long>();
  }
  EXPECT_EQ(n, s.calls);
  if (s.sum) {
    EXPECT_EQ(sum, *s.sum);
  }
}

std::vector<std::string> record_args(const TempDir& dir, const std::string& fn) {
  return {PROBECOST_BIN,  "record", "-o",  dir / "t.json", "--summary-json",
          dir / "s.json", "-b",     "big", "-b",           fn};
}

// Every executable mapping of short_target holds its file's bytes, and so do the first bytes
// after it (the next mapping, where a jump over map_end would have reached).
void expect_bytes_back(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  int checked = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("r-xp") == std::string::npos || line.find("short_target") == std::string::npos)
      continue;
    std::uint64_t start = std::stoull(line, nullptr, 16);
    std::uint64_t end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    expect_text_matches_file(pid, start, end - start);
    expect_text_matches_file(pid, end, 16);
    ++checked;
  }
  EXPECT_EQ(checked, 1);
}

class Short : public testing::TestWithParam<const char*> {};

TEST_P(Short, RecordedLaunchedExactly) {
  const std::string fn = GetParam();
  Result plain = run_command({SHORT_TARGET, "run", std::to_string(kCalls)});
  ASSERT_EQ(plain.exit_code, 0);
  TempDir dir{"probecost-short"};
  auto args = record_args(dir, fn);
  args.insert(args.end(), {"--", SHORT_TARGET, "run", std::to_string(kCalls)});
  Result r = run_command(args);
  ASSERT_EQ(r.exit_code, plain.exit_code) << r.err;
  EXPECT_EQ(r.out, plain.out);
  EXPECT_NE(r.err.find(fn + ": an int3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a jump needs 5"), std::string::npos) << r.err;
  auto said = parse_round(plain.out);
  expect_recorded(dir, said, fn);
  expect_recorded(dir, said, "big");
}

TEST_P(Short, RecordedAttachedExactlyAndLeftAsItWas) {
  const std::string fn = GetParam();
  const std::string n = std::to_string(kCalls);
  Target target(std::vector<std::string>{SHORT_TARGET, "serve"});
  ASSERT_EQ(target.ready_line, "ready");
  const std::string untraced = target.ask(n);
  TempDir dir{"probecost-short"};
  auto args = record_args(dir, fn);
  args.insert(args.begin() + 2, {"-p", std::to_string(target.pid)});
  Running rec(args);
  ASSERT_TRUE(rec.ready) << rec.stderr_text;
  EXPECT_EQ(target.ask(n), untraced);
  EXPECT_EQ(rec.finish(SIGINT), 0) << rec.stderr_text;
  auto said = parse_round(untraced);
  expect_recorded(dir, said, fn);
  expect_recorded(dir, said, "big");
  EXPECT_EQ(target.ask(n), untraced);
  expect_bytes_back(target.pid);
}

// `--via jump` puts a jump at every probe or at none: refused, with the reason, nothing touched.
TEST_P(Short, TraceViaJumpRefusesItTouchingNothing) {
  const std::string fn = GetParam();
  const std::string n = std::to_string(kCalls);
  Target target(std::vector<std::string>{SHORT_TARGET, "serve"});
  ASSERT_EQ(target.ready_line, "ready");
  const std::string untraced = target.ask(n);
  std::string pid = std::to_string(target.pid);
  Result attached = run_command({PROBECOST_BIN, "trace", "--via", "jump", "-p", pid, "-b", "big",
                                 "-b", fn, "-o", "/dev/null"});
  EXPECT_EQ(attached.exit_code, 2) << attached.err;
  for (const std::string& part : std::vector<std::string>{"process " + pid, fn, "a jump needs 5"})
    EXPECT_NE(attached.err.find(part), std::string::npos) << part << ": " << attached.err;
  EXPECT_EQ(target.ask(n), untraced);
  expect_bytes_back(target.pid);
  Result launched = run_command({PROBECOST_BIN, "trace", "--via", "jump", "-b", "big", "-b", fn,
                                 "-o", "/dev/null", "--", SHORT_TARGET, "run", n});
  EXPECT_EQ(launched.exit_code, 2) << launched.err;
  EXPECT_NE(launched.err.find("a jump needs 5"), std::string::npos) << launched.err;
  EXPECT_EQ(launched.out, "");  // the command never ran
}

// What `trace` gives it: an int3, every call counted; then the bytes back.
TEST_P(Short, TracedAttachedExactly) {
  const std::string fn = GetParam();
  const std::string n = std::to_string(kCalls);
  Target target(std::vector<std::string>{SHORT_TARGET, "serve"});
  ASSERT_EQ(target.ready_line, "ready");
  const std::string untraced = target.ask(n);
  Trace tr({"-p", std::to_string(target.pid), "-b", "big", "-b", fn});
  ASSERT_TRUE(tr.ready) << tr.stderr_text;
  EXPECT_EQ(target.ask(n), untraced);
  EXPECT_EQ(tr.finish(SIGINT), 0) << tr.stderr_text;
  auto said = parse_round(untraced);
  Json probes = tr.report()["probes"];
  EXPECT_EQ(probe_named(probes, "spec", fn).value("hits", -1L), said.at(fn).calls);
  EXPECT_EQ(probe_named(probes, "spec", fn).value("via", ""), "int3");
  EXPECT_EQ(probe_named(probes, "spec", "big").value("hits", -1L), said.at("big").calls);
  EXPECT_EQ(probe_named(probes, "spec", "big").value("via", ""), "jump");
  expect_bytes_back(target.pid);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Short,
                         testing::Values("short1", "short2", "short2_tail", "short3", "short4",
                                         "short4_mov", "page_end", "map_end"));

}  // namespace
}  // namespace probecost::test
