// Issue 23 item 5: names that are not UTF-8 (a symbol holding byte 0xff, a thread named by
// PR_SET_NAME with invalid bytes, a program run by such a name) never cost the report. Every
// writer's output parses and names the thing, each bad byte as U+FFFD in JSON: trace's JSON and
// CSV, record's Chrome JSON, its summary JSON and its CTF (read back by babeltrace2).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "run_capture.hpp"
#include "temp_dir.hpp"
#include "trace_harness.hpp"

namespace probecost::test {
namespace {

namespace fs = std::filesystem;

const std::string kSymbol =
    "odd\xff"
    "name";
const std::string kThread = "t\xff\xfe-odd";  // calls_target's PR_SET_NAME, and the link's name
// In JSON, each bad byte is U+FFFD (EF BF BD in UTF-8).
const std::string kSymbolJson =
    "odd\xef\xbf\xbd"
    "name";
const std::string kThreadJson = "t\xef\xbf\xbd\xef\xbf\xbd-odd";
constexpr long kCalls = 25;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// calls_target run as kThread (a link by that name): its process and thread are named so from
// its exec on, and by its own PR_SET_NAME.
struct OddRun {
  TempDir dir;
  std::string link = dir / kThread;
  OddRun() { fs::create_symlink(CALLS_TARGET, link); }
  Result run(std::vector<std::string> argv) {
    argv.insert(argv.end(), {"-b", kSymbol, "--", link, "odd", std::to_string(kCalls)});
    return run_command(argv);
  }
};

TEST(NotUtf8, TraceJsonAndCsvNameTheSymbolAndTheThread) {
  OddRun odd;
  Result json = odd.run({PROBECOST_BIN, "trace", "-q", "--via", "int3", "-v", "-f", "json", "-o",
                         odd.dir / "t.json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  Json report = Json::parse(read_file(odd.dir / "t.json"));
  ASSERT_EQ(report["probes"].size(), 1u) << report.dump(2);
  const Json& p = report["probes"][0];
  EXPECT_EQ(p["symbol"], kSymbolJson);
  EXPECT_EQ(p["hits"], kCalls);
  ASSERT_EQ(p["by_thread"].size(), 1u) << p.dump(2);
  EXPECT_EQ(p["by_thread"][0]["name"], kThreadJson);
  ASSERT_EQ(report["threads"].size(), 1u);
  EXPECT_EQ(report["threads"][0]["name"], kThreadJson);

  // CSV is bytes: the symbol as the program spelled it.
  Result csv = odd.run({PROBECOST_BIN, "trace", "-q", "-f", "csv", "-o", odd.dir / "t.csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  std::string text = read_file(odd.dir / "t.csv");
  EXPECT_NE(text.find(",odd\xff"
                      "name,"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(",25,"), std::string::npos) << text;  // kCalls hits
}

TEST(NotUtf8, RecordChromeJsonAndSummaryNameTheSymbolAndTheThread) {
  OddRun odd;
  Result r = odd.run({PROBECOST_BIN, "record", "-q", "-o", odd.dir / "t.json", "--summary-json",
                      odd.dir / "s.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json trace = Json::parse(read_file(odd.dir / "t.json"));
  long calls = 0;
  std::set<std::string> threads, processes;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == kSymbolJson) ++calls;
    if (e["ph"] == "M" && e["name"] == "thread_name") threads.insert(e["args"]["name"]);
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"]);
  }
  EXPECT_EQ(calls, kCalls);
  EXPECT_EQ(threads, std::set<std::string>{kThreadJson});
  EXPECT_EQ(processes, std::set<std::string>{kThreadJson});
  Json summary = Json::parse(read_file(odd.dir / "s.json"));
  ASSERT_EQ(summary["probes"].size(), 1u);
  EXPECT_EQ(summary["probes"][0]["function"], kSymbolJson);
  EXPECT_EQ(summary["probes"][0]["calls"], kCalls);
}

TEST(NotUtf8, RecordCtfIsReadByBabeltrace2) {
  if (std::system("babeltrace2 --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no babeltrace2";
  OddRun odd;
  Result r = odd.run({PROBECOST_BIN, "record", "-q", "--format", "ctf", "-o", odd.dir / "ctf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result bt = run_command({"/usr/bin/babeltrace2", odd.dir / "ctf"});
  ASSERT_EQ(bt.exit_code, 0) << bt.err;
  std::size_t entries = 0, pos = 0;
  while ((pos = bt.out.find("probecost:entry:", pos)) != std::string::npos) ++entries, ++pos;
  EXPECT_EQ(entries, static_cast<std::size_t>(kCalls));
  EXPECT_NE(bt.out.find("-odd"), std::string::npos) << bt.out.substr(0, 2000);
}

}  // namespace
}  // namespace probecost::test
