// probecost experiment and probecost report as a user runs them: every experiment counts every
// hit, its tables carry the seed's figures, and the report is one page that loads nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_capture.hpp"

using probecost::test::Result;
using probecost::test::run_command;

namespace {

Result run_probecost(std::vector<std::string> args) {
  args.insert(args.begin(), PROBECOST_BIN);
  return run_command(args);
}

std::string temp_path(const char* suffix) {
  std::string path = std::string("/tmp/probecost-test-XXXXXX") + suffix;
  int fd = ::mkstemps(path.data(), static_cast<int>(std::string(suffix).size()));
  if (fd >= 0) ::close(fd);
  return path;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(Experiment, UsageErrors) {
  Result r = run_probecost({"experiment", "frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown experiment 'frobnicate'"), std::string::npos) << r.err;
  r = run_probecost({"experiment", "scalability", "-m", "kprobe"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown mechanism 'kprobe'"), std::string::npos) << r.err;
  r = run_probecost({"report"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("-o FILE.html is required"), std::string::npos) << r.err;
}

// Tiny runs of all four: the figures mean nothing, but every hit must be counted.
TEST(Experiment, QuickRunsOfAllFourCountEveryHit) {
  Result r = run_probecost({"experiment", "all", "--quick", "-f", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // stderr is no terminal here: progress comes as lines, one as each experiment starts.
  for (const char* name : {"markers", "scalability", "multi-probe", "int3-vs-marker"}) {
    EXPECT_NE(r.err.find(std::string("probecost experiment: [0/")), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(std::string("] ") + name + ": "), std::string::npos) << name << r.err;
  }
  auto j = nlohmann::json::parse(r.out);
  std::vector<std::string> names;
  for (const auto& e : j["experiments"]) {
    names.push_back(e["name"]);
    EXPECT_TRUE(e["problems"].empty()) << e["problems"].dump();
    EXPECT_FALSE(e["then"].empty()) << e["name"];
    EXPECT_FALSE(e["notes"].empty()) << e["name"];
    EXPECT_FALSE(e["placement"].get<std::string>().empty()) << e["name"];
    const auto& columns = e["today"]["columns"];
    auto hits = std::find(columns.begin(), columns.end(), "hits") - columns.begin();
    ASSERT_LT(hits, static_cast<long>(columns.size())) << e["name"];
    for (const auto& row : e["today"]["rows"]) {
      std::string cell = row[hits];
      EXPECT_TRUE(cell == "exact" || cell == "-" || cell == "skipped") << row.dump();
    }
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"markers", "scalability", "multi-probe", "int3-vs-marker"}));
  const auto& markers = j["experiments"][0];
  EXPECT_EQ(markers["data"]["rows"].size(), 32u);  // 4 variants x 4 argument counts x on/off
  EXPECT_EQ(markers["today"]["rows"].size(), 33u);
  const auto& scalability = j["experiments"][1];
  int cpus = scalability["machine"]["cpus"];
  for (const auto& row : scalability["today"]["rows"]) {
    bool sliced = row[2].get<std::string>().find("time-sliced") != std::string::npos;
    EXPECT_EQ(sliced, std::stoi(row[1].get<std::string>()) > cpus) << row.dump();
  }
}

TEST(Report, FromJsonIsOnePageThatLoadsNothing) {
  std::string html = temp_path(".html");
  Result r = run_probecost({"report", "--from", REPORT_FIXTURE, "-o", html});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string page = slurp(html);
  ::unlink(html.c_str());
  EXPECT_EQ(count(page, "<svg class=\"chart\""), 6u);
  for (const char* chart : {"cost-per-hit", "cpu-share", "markers-disabled", "markers-enabled",
                            "scalability", "multi-probe"}) {
    EXPECT_NE(page.find(std::string("data-chart=\"") + chart + "\""), std::string::npos) << chart;
  }
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("href="), std::string::npos);
  EXPECT_EQ(page.find("http"), std::string::npos);
  // Each seed's own figures are on the page.
  for (const char* figure : {"2.01 µs", "1298.16", "20.5", "29,947", "1.387"}) {
    EXPECT_NE(page.find(figure), std::string::npos) << figure;
  }
}

// The user's own compare and overhead results, beside the seeds' experiments; the page's path
// said when it is written.
TEST(Report, FromSeveralFilesDrawsYourResultsBesideTheExperiments) {
  std::string html = temp_path(".html");
  Result r = run_probecost({"report", "--from", REPORT_FIXTURE, COMPARE_FIXTURE, "--from",
                            OVERHEAD_FIXTURE, "-o", html});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(
      r.err.find("probecost report: wrote " + html + " (4 experiment(s), 2 result(s) of your own)"),
      std::string::npos)
      << r.err;
  std::string page = slurp(html);
  EXPECT_EQ(count(page, "<svg class=\"chart\""), 9u);
  for (const char* chart : {"compare-1-cost", "compare-1-share", "overhead-2-chart"}) {
    EXPECT_NE(page.find(std::string("data-chart=\"") + chart + "\""), std::string::npos) << chart;
  }
  EXPECT_NE(page.find("Your compare: " + std::string(COMPARE_FIXTURE)), std::string::npos);
  EXPECT_NE(page.find("Your overhead: " + std::string(OVERHEAD_FIXTURE)), std::string::npos);

  // A JSON document probecost did not write is refused, and no page is left.
  std::string other = temp_path(".json");
  std::ofstream(other) << "{\"hello\": 1}";
  std::string page2 = temp_path(".html");
  ::unlink(page2.c_str());
  r = run_probecost({"report", "--from", other, "-o", page2});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is not the JSON of probecost experiment, compare or overhead"),
            std::string::npos)
      << r.err;
  EXPECT_NE(::access(page2.c_str(), F_OK), 0);
  ::unlink(other.c_str());
  ::unlink(html.c_str());
}
