// trace's figures as a first-time user reads them (issue 19 §3): int3 and jump hits each with
// the tracer's cost of their own, a short command's CPU share of one CPU, the same field names
// and the same "no figure" for a jump row's threads in text, JSON and CSV, the --stacks notice,
// and a help that says what the default puts in.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "run_capture.hpp"

using namespace probecost::test;
using Json = nlohmann::json;

namespace {

// events_target N --tiny: N calls of probecost_event (a jump fits) and N of probecost_tiny (a
// one-byte function: int3 only). It writes "stderr line" to its standard error first, where the
// report of a launched command goes too.
constexpr const char* kEvents = "30000";

Result trace(std::vector<std::string> options, std::vector<std::string> command) {
  std::vector<std::string> argv = {PROBECOST_BIN, "trace", "-q"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return run_command(argv);
}

Json report_of(const Result& r) {
  return Json::parse(r.err.substr(r.err.find('{')));
}

const Json& row(const Json& report, const std::string& symbol) {
  for (const auto& p : report["probes"]) {
    if (p["symbol"] == symbol) return p;
  }
  static const Json none;
  return none;
}

}  // namespace

TEST(TraceFigures, Int3AndJumpHitsEachTheirOwnCost) {
  auto r = trace({"-f", "json", "-b", "probecost_event", "-b", "probecost_tiny"},
                 {EVENTS_TARGET, kEvents, "--tiny"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = report_of(r);
  ASSERT_EQ(row(j, "probecost_event")["via"], "jump") << j.dump(2);
  ASSERT_EQ(row(j, "probecost_tiny")["via"], "int3") << j.dump(2);
  EXPECT_EQ(j["jump_hits"], 30000);
  EXPECT_EQ(j["int3_hits"], 30000);
  EXPECT_EQ(j["hits"], 60000);
  // Without --events a jump hit never runs the tracer; an int3 hit always does.
  EXPECT_EQ(j["tracer_cpu_ns_per_jump_hit"], 0.0);
  EXPECT_GT(j["tracer_cpu_ns_per_int3_hit"].get<double>(), 0.0);
  EXPECT_GE(j["syscalls_per_int3_hit"].get<double>(), 2.0);  // at least the wait and the resume
  EXPECT_FALSE(j.contains("tracer_cpu_ns_per_hit")) << "the average of both kinds";

  auto text =
      trace({"-b", "probecost_event", "-b", "probecost_tiny"}, {EVENTS_TARGET, kEvents, "--tiny"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.err.find("\n  int3 hits: 30000, "), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("\n  jump hits: 30000, none of the tracer's CPU"), std::string::npos)
      << text.err;
}

// A command over in a millisecond: its CPU is measured over the same window as the duration,
// to the nanosecond, not from clock ticks or from its start (/bin/true was "577.9% of a CPU").
TEST(TraceFigures, AShortCommandUsesAtMostOneCpu) {
  for (const char* via : {"jump", "int3"}) {
    auto r = trace({"-f", "json", "--via", via, "-b", "libc.so.6:getenv"}, {"/bin/true"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    Json j = report_of(r);
    EXPECT_LE(j["tracee_cpu_percent"].get<double>(), 100.0) << via << " " << j.dump(2);
    EXPECT_LE(j["tracer_cpu_percent"].get<double>(), 100.0) << via << " " << j.dump(2);
    EXPECT_LE(j["tracee_cpu_s"].get<double>(), j["duration_s"].get<double>()) << via;
  }
}

// A jump row has no threads figure (a jump hit is counted in the tracee, not by thread): "-" in
// text, null in JSON, empty in CSV; the rate is traced_hits_per_s in both.
TEST(TraceFigures, JumpRowsSayNoThreadsAlikeInEveryFormat) {
  std::vector<std::string> probes = {"-b", "probecost_event", "-b", "probecost_tiny"};
  std::vector<std::string> command = {EVENTS_TARGET, "1000", "--tiny"};
  auto js = trace({"-f", "json", probes[0], probes[1], probes[2], probes[3]}, command);
  ASSERT_EQ(js.exit_code, 0) << js.err;
  Json j = report_of(js);
  EXPECT_TRUE(row(j, "probecost_event")["threads"].is_null()) << j.dump(2);
  EXPECT_EQ(row(j, "probecost_tiny")["threads"], 1);
  EXPECT_TRUE(row(j, "probecost_event").contains("traced_hits_per_s"));

  auto csv = trace({"-f", "csv", probes[0], probes[1], probes[2], probes[3]}, command);
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  std::istringstream lines(csv.err.substr(csv.err.find("pid,")));
  std::string header, line;
  std::getline(lines, header);
  EXPECT_EQ(header,
            "pid,image,spec,address,module,symbol,implementation,via,hits,traced_hits_per_s,"
            "threads");
  int rows = 0;
  while (std::getline(lines, line)) {
    ++rows;
    if (line.find(",jump,") != std::string::npos) {
      EXPECT_EQ(line.back(), ',') << line;
    } else {
      EXPECT_EQ(line.substr(line.size() - 2), ",1") << line;
    }
  }
  EXPECT_EQ(rows, 2) << csv.err;

  auto text = trace({probes[0], probes[1], probes[2], probes[3]}, command);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  std::istringstream tl(text.err);
  while (std::getline(tl, line)) {
    if (line.rfind("probecost_event ", 0) == 0) {
      EXPECT_EQ(line.back(), '-') << line;
    } else if (line.rfind("probecost_tiny ", 0) == 0) {
      EXPECT_EQ(line.back(), '1') << line;
    }
  }
}

// --stacks says before the trace what a hit will cost. By default a jump probe copies a
// snapshot of the stack (no stop) and the report counts the snapshots unwound after the run;
// with --stack-size 0 every probe is an int3 and the report gives the unwinding per hit.
TEST(TraceFigures, StacksSayTheirCostFirst) {
  std::vector<std::string> argv = {PROBECOST_BIN,     "trace", "--stacks",    "-b",
                                   "probecost_event", "--",    EVENTS_TARGET, "2000"};
  auto r = run_command(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto notice = r.err.find("probecost trace: --stacks: each jump probe's hit copies");
  auto tracing = r.err.find("probecost trace: tracing process");
  ASSERT_NE(notice, std::string::npos) << r.err;
  EXPECT_LT(notice, tracing) << r.err;
  EXPECT_NE(r.err.find("\n  jump hits: 2000, "), std::string::npos) << r.err;
  // Each hit's snapshot unwound, or lost where the unwinding fell behind (never waited for).
  EXPECT_NE(r.err.find("stacks of jump hits: "), std::string::npos) << r.err;
}

TEST(TraceFigures, StacksWithStackSizeZeroSayTheirCostFirstAndForceInt3) {
  std::vector<std::string> argv = {PROBECOST_BIN, "trace", "--stacks",        "--stack-size",
                                   "0",           "-b",    "probecost_event", "--",
                                   EVENTS_TARGET, "2000"};
  auto r = run_command(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto notice = r.err.find("probecost trace: --stacks: every hit stops the thread");
  auto tracing = r.err.find("probecost trace: tracing process");
  ASSERT_NE(notice, std::string::npos) << r.err;
  EXPECT_LT(notice, tracing) << r.err;
  EXPECT_NE(r.err.find("every probe is an int3 (a jump never stops the thread)"),
            std::string::npos);
  EXPECT_NE(r.err.find(" us here"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\n  int3 hits: 2000, "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stacks: unwinding took "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("jump hits:"), std::string::npos) << r.err;
}

TEST(TraceFigures, HelpSaysJumpsWhereTheyFitAndWhatStacksCost) {
  auto help = run_command({PROBECOST_BIN, "trace", "--help"});
  ASSERT_EQ(help.exit_code, 0);
  std::string words;  // the help's words, as one line (the options' texts are wrapped)
  std::istringstream in(help.out);
  for (std::string w; in >> w;) words += w + " ";
  EXPECT_EQ(words.find("Puts int3 probes"), std::string::npos) << help.out;
  EXPECT_NE(words.find("Each probe is a jump to a trampoline where the site allows one"),
            std::string::npos)
      << help.out;
  EXPECT_NE(words.find("--stacks capture the call stack at every hit: a jump probe copies the "
                       "registers and the top of the thread's stack (--stack-size)"),
            std::string::npos)
      << help.out;
}
