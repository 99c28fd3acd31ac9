// probecost overhead as a user runs it: bad input, the arithmetic, and measurements of
// events_target, whose number of events per run is known.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "overhead_fixture.hpp"

using namespace probecost::test;

TEST(OverheadErrors, BadInputIsAClearErrorBeforeAnythingRuns) {
  std::string target = EVENTS_TARGET;
  expect_usage_error({"overhead"}, "nothing to do");
  expect_usage_error({"overhead", "-b", "probecost_event"}, "nothing to measure");
  expect_usage_error({"overhead", "-b", "probecost_event", "--"}, "nothing to measure");
  expect_usage_error({"overhead", "--", target, "10"}, "no probe");
  expect_usage_error({"overhead", "-b", "probecost_event", "--calibration", "/no/such/file.json",
                      "--", target, "10"},
                     "cannot read the calibration '/no/such/file.json'");
  std::string not_compare = temp_file("{\"hello\": 1}");
  expect_usage_error(
      {"overhead", "-b", "probecost_event", "--calibration", not_compare, "--", target, "10"},
      "is not a report of 'probecost compare -f json'");
  ::unlink(not_compare.c_str());
  expect_usage_error({"overhead", "-c", "2.01", "us"}, "unexpected argument 'us'");
  expect_usage_error({"overhead", "-c", "2.01"}, "bad cost '2.01'");
  expect_usage_error({"overhead", "-c", "2.01us", "--rate", "12x"}, "bad rate '12x'");
  expect_usage_error({"overhead", "-b", "probecost_event", "stray", "--", target, "10"},
                     "unexpected argument 'stray'");
  expect_usage_error({"overhead", "-b", "probecost_event", "-p", "1"}, "needs --duration");
  expect_usage_error({"overhead", "-b", "probecost_event", "-d", "1", "--", target, "10"},
                     "--duration is for -p");
  expect_usage_error({"overhead", "-b", "probecost_event", "-p", "1", "-d", "1", "--", target},
                     "not both");
  expect_usage_error(
      {"overhead", "-b", "probecost_event", "-p", "1", "-d", "1", "--placement", "same-cpu"},
      "only --placement free");
  expect_usage_error({"overhead", "-c", "1us", "-b", "probecost_event", "--", target, "10"},
                     "--cost is the arithmetic alone");
  expect_usage_error({"overhead", "-b", "probecost_event", "-r", "0", "--", target, "10"},
                     "bad --repeat '0'");
  expect_usage_error({"overhead", "-b", "probecost_event", "--via", "teleport", "--", target},
                     "unknown --via 'teleport'");
  expect_usage_error({"overhead", "-b", "probecost_event", "--placement", "moon", "--", target},
                     "bad placement 'moon'");
  expect_usage_error({"overhead", "-b", "probecost_event", "-f", "csv", "--", target},
                     "bad format 'csv' for a measurement");
  expect_usage_error(
      {"overhead", "-b", "probecost_event", "--stdin", "/no/such/input", "--", target},
      "cannot read --stdin '/no/such/input'");
  std::string cal = fixture_calibration();
  expect_usage_error({"overhead", "-b", "no_such_symbol_anywhere", "--warmup", "0", "--calibration",
                      cal, "--", target, "10"},
                     "no_such_symbol_anywhere");
  expect_usage_error(
      {"overhead", "-b", "probecost_event", "--calibration", cal, "--", "/no/such/program"},
      "/no/such/program");
  ::unlink(cal.c_str());
}

TEST(OverheadArithmetic, CostIsRepeatable) {
  Result r = run_probecost({"overhead", "-c", "2.01us", "-c", "220ns", "--rate", "749994"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("150.7% of a CPU"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("16.5% of a CPU"), std::string::npos) << r.out;
  r = run_probecost({"overhead", "-c", "2.01us", "-c", "220ns", "--rate", "749994", "-f", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_EQ(j["costs"].size(), 2u);
  EXPECT_NEAR(j["costs"][0]["extrapolation"][0]["cpu_percent"].get<double>(), 150.75, 0.01);
  EXPECT_NEAR(j["costs"][1]["extrapolation"][0]["cpu_percent"].get<double>(), 16.5, 0.01);
}

TEST(OverheadRun, KnownEventsGiveTheRateSlowdownAndPredictions) {
  std::string cal = fixture_calibration();
  Result r =
      run_probecost({"overhead", "-b", "probecost_event", "--via", "int3", "-r", "2", "--warmup",
                     "0", "--calibration", cal, "-f", "json", "--", EVENTS_TARGET, "3000"});
  ::unlink(cal.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["command"], Json::array({EVENTS_TARGET, "3000"}));
  EXPECT_TRUE(j["pid"].is_null());
  EXPECT_EQ(j["repeat"], 2);
  EXPECT_EQ(j["via"], "int3");
  EXPECT_EQ(j["mechanism"], "int3-ptrace-fast");
  EXPECT_EQ(j["hits"], 3000);
  ASSERT_EQ(j["probes"].size(), 1u);
  EXPECT_EQ(j["probes"][0]["spec"], "probecost_event");
  EXPECT_EQ(j["probes"][0]["hits"], 3000);

  // The runs, traced and untraced by turns, every one counted exactly and ended well.
  ASSERT_EQ(j["runs"].size(), 4u);
  std::vector<double> slowdowns, untraced_wall, untraced_cpu;
  for (std::size_t i = 0; i < 4; i += 2) {
    const Json& t = j["runs"][i];
    const Json& u = j["runs"][i + 1];
    ASSERT_TRUE(t["traced"].get<bool>());
    ASSERT_FALSE(u["traced"].get<bool>());
    EXPECT_EQ(t["hits"], 3000);
    EXPECT_EQ(t["end"], "exited with status 0");
    EXPECT_TRUE(u["ok"].get<bool>());
    // The tracer worked on the traps. (Not that the traced run took longer: 3000 traps cost
    // ~15 ms, which a busy machine's scheduling delays of the untraced run can exceed.)
    EXPECT_GT(t["tracer_cpu_s"].get<double>(), 0);
    slowdowns.push_back(t["wall_s"].get<double>() / u["wall_s"].get<double>());
    untraced_wall.push_back(u["wall_s"]);
    untraced_cpu.push_back(u["cpu_s"]);
  }
  EXPECT_NEAR(j["untraced"]["wall_s"]["median"].get<double>(), median(untraced_wall), 1e-12);
  double rate = j["event_rate_per_s"], rate_cpu = j["event_rate_per_cpu_s"];
  EXPECT_NEAR(rate, 3000 / median(untraced_wall), rate * 1e-9);
  EXPECT_NEAR(rate_cpu, 3000 / median(untraced_cpu), rate_cpu * 1e-9);
  double slowdown = j["measured"]["slowdown"]["median"];
  EXPECT_NEAR(slowdown, median(slowdowns), 1e-9);
  EXPECT_GT(j["measured"]["cpu_ns_per_hit"]["median"].get<double>(), 0);
  for (const char* key : {"wall_s", "cpu_s", "tracer_cpu_s"}) {
    EXPECT_TRUE(j["traced"][key].contains("median")) << key;
  }
  EXPECT_TRUE(j["measured"]["extra_cpu_percent"].contains("max"));

  // Every mechanism of the calibration but the baseline, in its order: "uprobe" included.
  std::vector<std::string> names;
  for (const auto& p : j["predicted"]) names.push_back(p["mechanism"]);
  EXPECT_EQ(names, (std::vector<std::string>{"marker", "int3-ptrace-fast", "jump", "uprobe"}));
  const Json& fast = predicted(j, "int3-ptrace-fast");
  EXPECT_EQ(fast["cpu_ns_per_hit"], 10000);
  EXPECT_NEAR(fast["cpu_percent"].get<double>(), rate_cpu * 10000 / 1e7, 1e-9);
  double predicted_slowdown = 1 + rate * 10000 / 1e9;
  EXPECT_NEAR(fast["slowdown"].get<double>(), predicted_slowdown, 1e-9);
  EXPECT_NEAR(j["prediction_error_percent"].get<double>(),
              100 * (predicted_slowdown / slowdown - 1), 1e-6);
  EXPECT_EQ(j["calibration"]["machine"], "Fixture CPU, Linux 0, 2 CPUs");
  EXPECT_GE(j["calibration"]["age_s"].get<double>(), 0);
  EXPECT_TRUE(j["calibration"]["source"].get<std::string>().find("/tmp/probecost-overhead-test-") ==
              0);
}

TEST(OverheadRun, JumpProbesInTwoThreadsCountEveryEvent) {
  std::string cal = fixture_calibration();
  Result r = run_probecost({"overhead", "-b", "probecost_event", "--via", "jump", "-r", "1",
                            "--warmup", "0", "--calibration", cal, "-f", "json", "--",
                            EVENTS_TARGET, "5000", "--threads", "2"});
  ::unlink(cal.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["mechanism"], "jump");
  EXPECT_EQ(j["hits"], 10000);
  EXPECT_EQ(j["probes"][0]["via"], "jump");
  EXPECT_EQ(predicted(j, "jump")["cpu_ns_per_hit"], 2);
}

TEST(OverheadRun, StdinIsDevNullAndOutputDiscardedUnlessAsked) {
  std::string cal = fixture_calibration();
  std::vector<std::string> base = {"overhead", "-b", "probecost_event", "--via", "int3", "-r", "1",
                                   "--warmup", "0",  "--calibration",   cal};
  std::vector<std::string> command = {"--", EVENTS_TARGET, "10", "--read-stdin"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), command.begin(), command.end());
    return run_probecost(args);
  };
  Result r = with({});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("events="), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("stderr line"), std::string::npos) << r.err;

  r = with({"--show-output"});  // both runs' output, on probecost's stderr
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("events="), std::string::npos) << r.out;
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(r.err, "stdin=0 bytes"), 2) << r.err;
  EXPECT_EQ(count(r.err, "events=10\n"), 2) << r.err;
  EXPECT_EQ(count(r.err, "stderr line"), 2) << r.err;

  std::string input = temp_file("hello");  // read from its start by each run
  r = with({"--show-output", "--stdin", input});
  ::unlink(input.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.err, "stdin=5 bytes"), 2) << r.err;
  ::unlink(cal.c_str());
}

TEST(OverheadRun, AFailingCommandIsReportedNotAveragedSilently) {
  std::string cal = fixture_calibration();
  Result r = run_probecost({"overhead", "-b", "probecost_event", "--via", "int3", "-r", "1",
                            "--warmup", "0", "--calibration", cal, "-f", "json", "--",
                            EVENTS_TARGET, "10", "--exit", "3"});
  ::unlink(cal.c_str());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("not to be trusted"), std::string::npos) << r.err;
  Json j = Json::parse(r.out);
  std::string warnings = j["warnings"].dump();
  EXPECT_NE(warnings.find("traced run 1: the command exited with status 3"), std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("untraced run 1: the command exited with status 3"), std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("no pair of runs ended with status 0"), std::string::npos) << warnings;
  EXPECT_FALSE(j["runs"][0]["ok"].get<bool>());
}

TEST(OverheadRun, ACommandThatExecsIsFollowedIntoTheNewImage) {
  // The first image execs itself (as a wrapper script execs the program): the probes go into
  // the new image and count its events; the report has one row per probe, not one per image.
  std::string cal = fixture_calibration();
  Result r = run_probecost({"overhead", "-b", "probecost_event", "--via", "int3", "-r", "1",
                            "--warmup", "0", "--calibration", cal, "-f", "json", "--",
                            EVENTS_TARGET, "700", "--exec-self"});
  ::unlink(cal.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["hits"], 700);
  ASSERT_EQ(j["probes"].size(), 1u) << j["probes"].dump();
  EXPECT_EQ(j["probes"][0]["hits"], 700);
  EXPECT_EQ(j["runs"][0]["end"], "exited with status 0");
  // Held stopped twice, once per image: both are left out of the traced wall time.
  EXPECT_GT(j["runs"][0]["held_s"].get<double>(), 0);
}

TEST(OverheadRun, ACtrlCReportsTheRunsDoneSoFarMarkedPartial) {
  std::string cal = fixture_calibration();
  for (const char* format : {"json", "text"}) {
    std::string runs = temp_file("");  // where the target counts its runs
    // Runs go traced 1, untraced 1, traced 2, ...: the third interrupts probecost as a Ctrl-C
    // would, so the second pair is lost and the first reported.
    Result r = run_probecost({"overhead", "-b", "probecost_event", "--via", "int3", "-r", "5",
                              "--warmup", "0", "--calibration", cal, "-f", format, "--",
                              EVENTS_TARGET, "200", "--sigint-parent-at", "3", runs});
    ::unlink(runs.c_str());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("interrupted after 1 of 5 pairs: the report is partial"),
              std::string::npos)
        << r.err;
    if (std::string(format) == "text") {
      EXPECT_NE(r.out.find("PARTIAL: interrupted after 1 of 5 pairs of runs"), std::string::npos)
          << r.out;
      continue;
    }
    Json j = Json::parse(r.out);
    EXPECT_TRUE(j["partial"].get<bool>());
    EXPECT_EQ(j["planned"], 5);
    EXPECT_EQ(j["repeat"], 1);
    ASSERT_EQ(j["runs"].size(), 2u);
    EXPECT_EQ(j["hits"], 200);
    EXPECT_FALSE(j["measured"]["slowdown"].is_null());
    EXPECT_NE(j["notes"].dump().find("the figures are from the 1 of 5 pairs"), std::string::npos)
        << j["notes"].dump();
  }
  ::unlink(cal.c_str());
}

TEST(OverheadCalibration, BuiltInIsCachedPerMachineAndRedoneOnRequest) {
  char dir[] = "/tmp/probecost-overhead-cache-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  ::setenv("XDG_CACHE_HOME", dir, 1);
  std::vector<std::string> args = {
      "overhead", "-b", "probecost_event", "--via",    "jump",       "-r",         "1",
      "--warmup", "0",  "--placement",     "same-cpu", "--inferior", INFERIOR_BIN, "-f",
      "json",     "--", EVENTS_TARGET,     "100"};
  auto source = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = args;
    a.insert(a.begin() + 1, extra.begin(), extra.end());
    Result r = run_probecost(a);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    Json j = Json::parse(r.out);
    EXPECT_EQ(j["calibration"]["placement"], "same-cpu");
    return j["calibration"]["source"].get<std::string>();
  };
  std::string first = source({});
  EXPECT_NE(first.find("measured now (none cached yet), cached in " + std::string(dir) +
                       "/probecost/calibration-"),
            std::string::npos)
      << first;
  EXPECT_EQ(source({}).rfind("built-in, cached in " + std::string(dir) + "/probecost/", 0), 0u);
  EXPECT_NE(source({"--recalibrate"}).find("measured now (--recalibrate)"), std::string::npos);
  ::unsetenv("XDG_CACHE_HOME");
  std::string rm = std::string("rm -rf ") + dir;
  EXPECT_EQ(std::system(rm.c_str()), 0);
}
