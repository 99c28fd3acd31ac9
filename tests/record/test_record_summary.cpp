// The summary's latency histogram and its printed and JSON forms (record/histogram.hpp,
// record/summary.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "record/histogram.hpp"
#include "record/summary.hpp"
#include "tests/record/record_fixtures.hpp"

namespace probecost::record {
namespace {

using testing::entry;
using testing::exit;

// Nearest rank: the smallest value with at least p% of the values at or below it.
std::uint64_t exact_percentile(std::vector<std::uint64_t> v, double p) {
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::max<std::size_t>(rank, 1) - 1];
}

TEST(RecordHistogram, SmallValuesAreExact) {
  LatencyHistogram h;
  std::vector<std::uint64_t> values;
  for (std::uint64_t v = 0; v < 128; ++v)
    for (std::uint64_t k = 0; k <= v % 3; ++k) values.push_back(v);
  for (auto v : values) h.add(v);
  for (double p : {1.0, 10.0, 50.0, 90.0, 99.0, 100.0})
    EXPECT_EQ(h.percentile(p), exact_percentile(values, p)) << "p" << p;
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 127u);
  EXPECT_EQ(h.count(), values.size());
}

TEST(RecordHistogram, PercentilesWithinTheBoundOverManyDecades) {
  std::mt19937_64 rng(17);
  std::lognormal_distribution<double> dist(8.0, 2.5);  // ~3 µs median, ns to seconds
  LatencyHistogram h;
  std::vector<std::uint64_t> values;
  for (int i = 0; i < 200'000; ++i) {
    auto v = static_cast<std::uint64_t>(dist(rng));
    values.push_back(v);
    h.add(v);
  }
  const double bound = 1.0 / (1 << (LatencyHistogram::kSubBits + 1));  // 0.39%
  for (double p : {0.1, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0}) {
    double exact = static_cast<double>(exact_percentile(values, p));
    double got = static_cast<double>(h.percentile(p));
    EXPECT_LE(std::abs(got - exact), exact * bound + 0.5) << "p" << p;
  }
  EXPECT_EQ(h.min(), *std::min_element(values.begin(), values.end()));
  EXPECT_EQ(h.max(), *std::max_element(values.begin(), values.end()));
}

TEST(RecordHistogram, Log2BucketsAreExact) {
  LatencyHistogram h;
  for (std::uint64_t v : {0, 1, 2, 3, 4, 7, 8, 127, 128, 255, 256, 1023, 1024, 1 << 20}) h.add(v);
  h.add(UINT64_MAX);
  std::vector<std::uint64_t> want(65, 0);
  // [0] [1] [2,4) [4,8) [8,16) .. [64,128) [128,256) [256,512) [512,1K) [1K,2K) .. [1M,2M) ..
  want[0] = 1, want[1] = 1, want[2] = 2, want[3] = 2, want[4] = 1, want[7] = 1, want[8] = 2;
  want[9] = 1, want[10] = 1, want[11] = 1, want[21] = 1, want[64] = 1;
  EXPECT_EQ(h.log2_counts(), want);
}

TEST(RecordHistogram, PrintedAsBpftraceHist) {
  std::vector<std::uint64_t> counts(13, 0);
  counts[3] = 2;   // [4, 8)
  counts[4] = 8;   // [8, 16)
  counts[12] = 4;  // [2K, 4K)
  std::string text = log2_hist_text(counts);
  std::istringstream lines(text);
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  ASSERT_EQ(got.size(), 10u);
  std::string bar52(52, '@');
  EXPECT_EQ(got[0],
            "[4, 8)                 2 |@@@@@@@@@@@@@                                       |");
  EXPECT_EQ(got[1], "[8, 16)                8 |" + bar52 + "|");
  EXPECT_EQ(got[2],
            "[16, 32)               0 |                                                    |");
  EXPECT_EQ(got[7],
            "[512, 1K)              0 |                                                    |");
  EXPECT_EQ(got[8],
            "[1K, 2K)               0 |                                                    |");
  EXPECT_EQ(got[9],
            "[2K, 4K)               4 |" + std::string(26, '@') + std::string(26, ' ') + "|");
  std::vector<std::uint64_t> small = {3, 1};
  EXPECT_EQ(log2_hist_text(small), "[0]                    3 |" + bar52 +
                                       "|\n[1]                    1 |" + std::string(17, '@') +
                                       std::string(35, ' ') + "|\n");
  EXPECT_EQ(log2_hist_text({}), "");
}

// A stream with known latencies on two probes, through the summary.
Summary summarise(const RunInfo& run) {
  Summary s(run);
  auto feed = [&](const Event& e) { s.event(e); };
  // f: 3 calls of 10, 20, 1000 ns; one more left open; g: one returned, one unwound, one skipped.
  std::vector<Event> f = {entry(1, 0, 100), exit(1, 0, 110),  entry(1, 0, 200), exit(1, 0, 220),
                          entry(2, 0, 300), exit(2, 0, 1300), entry(2, 0, 2000)};
  for (const Event& e : f) feed(e);
  s.call(f[0], f[1]);
  s.call(f[2], f[3]);
  s.call(f[4], f[5]);
  s.unmatched(f[6], Unmatched::open_at_end);
  Event g1 = entry(1, 1, 500), g1x = exit(1, 1, 505), g2 = entry(1, 1, 600),
        g2u = testing::unwound(1, 1, 650), g3 = entry(1, 1, 700);
  for (const Event& e : {g1, g1x, g2, g2u, g3}) feed(e);
  s.call(g1, g1x);
  s.call(g2, g2u);
  s.unmatched(g3, Unmatched::skipped);
  s.orphan(exit(3, 1, 900));
  s.lost({100, 1, 1, 7, 0, 4, 3});  // 4 entries and 3 exits
  s.lost({100, 1, kAnyProbe, 3});
  return s;
}

TEST(RecordSummary, CountsAndLatencies) {
  RunInfo run = testing::run_of({"f", "g"});
  Summary s = summarise(run);
  const ProbeSummary& f = s.probe(0);
  EXPECT_EQ(f.calls, 4u);
  EXPECT_EQ(f.returns, 3u);
  EXPECT_EQ(f.unmatched, 1u);
  EXPECT_EQ(f.open_at_end, 1u);
  EXPECT_EQ(f.events_written, 7u);
  EXPECT_EQ(f.latency.min(), 10u);
  EXPECT_EQ(f.latency.percentile(50), 20u);
  EXPECT_EQ(f.latency.max(), 1000u);
  const ProbeSummary& g = s.probe(1);
  EXPECT_EQ(g.calls, 3u);
  EXPECT_EQ(g.returns, 1u);
  EXPECT_EQ(g.unwound, 1u);
  EXPECT_EQ(g.unmatched, 1u);
  EXPECT_EQ(g.orphan_exits, 1u);
  EXPECT_EQ(g.events_lost, 7u);
  EXPECT_EQ(g.calls_lost, 4u);
  EXPECT_EQ(g.returns_lost, 3u);
  EXPECT_EQ(g.latency.count(), 1u);  // the unwound call's time is not a latency
  EXPECT_EQ(s.lost_unattributed(), 3u);
}

TEST(RecordSummary, JsonHasTheIssuesFields) {
  RunInfo run = testing::run_of({"f", "g"});
  nlohmann::json j = summarise(run).json();
  ASSERT_EQ(j["probes"].size(), 2u);
  const auto& f = j["probes"][0];
  EXPECT_EQ(f["spec"], "f");
  EXPECT_EQ(f["calls"], 4);
  EXPECT_EQ(f["returns"], 3);
  EXPECT_EQ(f["unmatched"], 1);
  EXPECT_EQ(
      f["latency_ns"],
      (nlohmann::json{{"min", 10}, {"p50", 20}, {"p90", 1000}, {"p99", 1000}, {"max", 1000}}));
  // 10 in [8, 16), 20 in [16, 32), 1000 in [512, 1024): the empty buckets between are listed.
  ASSERT_EQ(f["histogram"].size(), 7u);
  EXPECT_EQ(f["histogram"][0], (nlohmann::json{{"low_ns", 8}, {"high_ns", 16}, {"count", 1}}));
  EXPECT_EQ(f["histogram"][1], (nlohmann::json{{"low_ns", 16}, {"high_ns", 32}, {"count", 1}}));
  EXPECT_EQ(f["histogram"][2]["count"], 0);
  EXPECT_EQ(f["histogram"][6], (nlohmann::json{{"low_ns", 512}, {"high_ns", 1024}, {"count", 1}}));
  EXPECT_EQ(f["events_written"], 7);
  EXPECT_EQ(f["events_lost"], 0);
  EXPECT_EQ(j["probes"][1]["events_lost"], 7);  // records, as before
  EXPECT_EQ(j["probes"][1]["calls_lost"], 4);
  EXPECT_EQ(j["probes"][1]["returns_lost"], 3);
  EXPECT_EQ(j["probes"][1]["unwound"], 1);
  EXPECT_EQ(j["events_lost_unattributed"], 3);
}

TEST(RecordSummary, PrintedTable) {
  RunInfo run = testing::run_of({"f", "g"});
  std::ostringstream out;
  summarise(run).print(out);
  std::string text = out.str();
  EXPECT_NE(text.find("probe      calls    returns    unwound  unmatched       lost     min ns"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("f              4          3          0          1          0         10"
                      "         20       1000       1000       1000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("@latency_ns[f]:\n[8, 16)                1 |"), std::string::npos) << text;
  EXPECT_NE(text.find("g: 1 returns without their entry"), std::string::npos) << text;
  // The table's lost is in calls, as calls is; returns lost are said apart.
  EXPECT_NE(text.find("g              3          1          1          1          4 "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("g: 3 returns lost (a call whose entry was kept is unmatched)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("lost: 3 records of unknown probes"), std::string::npos) << text;
}

TEST(RecordSummary, OverloadsOfOneSpecAreNamedByTheirFunction) {
  // -b middle on two overloads, and --all-matches finding one function in two modules.
  RunInfo run = testing::run_of({"f", "g"});
  run.probes = {{"middle", "middle(long)", "t", 0x1000},
                {"middle", "middle(int)", "t", 0x1010},
                {"twin", "twin()", "liba.so", 0x2000},
                {"twin", "twin()", "libb.so", 0x3000},
                {"f", "f", "t", 0x4000}};
  Summary s(run);
  std::ostringstream out;
  s.print(out);
  std::string text = out.str();
  for (const char* row : {"\nmiddle(long)  ", "\nmiddle(int)  ", "\ntwin() in liba.so  ",
                          "\ntwin() in libb.so  ", "\nf  "})
    EXPECT_NE(text.find(row), std::string::npos) << row << " in\n" << text;
}

}  // namespace
}  // namespace probecost::record
