// `probecost replay`'s reading and printing (replay/) on recordings that record/'s own writers
// made of a synthetic stream: the same calls from the Chrome JSON and from the CTF directory,
// counts equal to the summary's, the tree's nesting, the filters, self times, and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "record/recorder.hpp"
#include "replay/replay.hpp"
#include "temp_dir.hpp"
#include "tests/record/record_fixtures.hpp"

namespace probecost::replay {
namespace {

namespace fs = std::filesystem;
using record::testing::entry;
using record::testing::exit;

// Thread 7: outer(1, 2) holds inner twice, then an outer that is still running at the end.
// Thread 8: outer holds an inner left without a return, then a return of inner whose entry is
// not there. 1 tick = 1 ns.
void feed(record::Recorder& rec) {
  rec.thread_name(100, 7, "main", 0);
  rec.add(entry(7, 0, 1000, 0, {1, 2}));
  rec.add(entry(7, 1, 1010, 0, {3, 4}));
  rec.add(exit(7, 1, 1060, 7));
  rec.add(entry(7, 1, 1070, 0, {5, 0x7ffd12345678}));
  rec.add(exit(7, 1, 1100, 8));
  rec.add(exit(7, 0, 1200, 9));
  rec.add(entry(8, 0, 2000));
  rec.add(entry(8, 1, 2010));
  rec.add(exit(8, 0, 2100, static_cast<std::uint64_t>(-12)));
  rec.add(exit(8, 1, 2200, 1));
  rec.add(entry(7, 0, 3000));
  rec.finish();
}

class Replay : public ::testing::Test {
 protected:
  test::TempDir dir{"probecost-replay"};
  std::string json = dir / "t.json", ctf = dir / "ctf";
  record::RunInfo run = record::testing::run_of({"outer", "inner"}, 2);

  void SetUp() override {
    for (auto [format, path] :
         {std::pair{record::TraceFormat::chrome, json}, {record::TraceFormat::ctf, ctf}}) {
      record::Recorder rec(run, format, path);
      feed(rec);
    }
  }
  static Collected read(const std::string& path, bool keep_args = true) {
    Collected c(keep_args);
    read_recording(path, c);
    c.sort();
    return c;
  }
  static std::string tree(const std::string& path, const Filter& f = {}) {
    std::ostringstream out;
    print_tree(out, read(path), f);
    return out.str();
  }
};

const char* kTree =
    "#     DURATION      TID     FUNCTION\n"
    "# thread 7 (main) of process 100: 4 calls\n"
    "             [     7] | outer(1, 2) {\n"
    "    0.050 us [     7] |   inner(3, 4) = 7;\n"
    "    0.030 us [     7] |   inner(5, 0x7ffd12345678) = 8;\n"
    "    0.200 us [     7] | } = 9; /* outer */\n"
    "           - [     7] | outer(0, 0) (no return: still running when the recording ended);\n"
    "# thread 8 of process 100: 3 calls\n"
    "             [     8] | outer(0, 0) {\n"
    "           - [     8] |   inner(0, 0) (no return: an outer frame returned first (unwound "
    "past));\n"
    "    0.100 us [     8] | } = -12; /* outer */\n"
    "           - [     8] | } = 1; /* inner: its entry is not in the recording */\n";

TEST_F(Replay, TheTreeFromChromeJsonAndFromCtfIsTheSame) {
  EXPECT_EQ(tree(json), kTree);
  EXPECT_EQ(tree(ctf), kTree);
}

TEST_F(Replay, CountsAndTimesEqualTheSummarys) {
  record::Summary summary(run);
  {
    // The summary of the same stream, as record prints it.
    record::Recorder rec(run, record::TraceFormat::chrome, dir / "again.json");
    feed(rec);
    for (std::uint32_t p = 0; p < 2; ++p) {
      for (const std::string& path : {json, ctf}) {
        std::ostringstream out;
        print_report_json(out, read(path, false), Filter{});
        auto j = nlohmann::json::parse(out.str());
        const auto& s = rec.summary().probe(p);
        const char* name = p == 0 ? "outer" : "inner";
        bool found = false;
        for (const auto& row : j["functions"]) {
          if (row["function"] != name) continue;
          found = true;
          EXPECT_EQ(row["calls"], s.calls) << path << " " << name;
          EXPECT_EQ(row["returned"], s.returns) << path << " " << name;
          EXPECT_EQ(row["unmatched"], s.unmatched) << path << " " << name;
          EXPECT_EQ(row["orphan_returns"], s.orphan_exits) << path << " " << name;
          EXPECT_EQ(row["min_ns"], s.latency.min()) << path << " " << name;
          EXPECT_EQ(row["max_ns"], s.latency.max()) << path << " " << name;
        }
        EXPECT_TRUE(found) << name << " in " << out.str();
      }
    }
  }
}

TEST_F(Replay, SelfTimeIsTotalLessTheCallsMade) {
  for (const std::string& path : {json, ctf}) {
    std::ostringstream out;
    print_report_json(out, read(path, false), Filter{});
    auto j = nlohmann::json::parse(out.str());
    ASSERT_EQ(j["functions"].size(), 2u) << out.str();
    const auto& outer = j["functions"][0];  // by total time: outer first
    EXPECT_EQ(outer["function"], "outer");
    EXPECT_EQ(outer["total_ns"], 300);
    EXPECT_EQ(outer["self_ns"], 220);  // 200 - 50 - 30, and 100
    EXPECT_EQ(outer["p50_ns"], 100);
    const auto& inner = j["functions"][1];
    EXPECT_EQ(inner["total_ns"], 80);
    EXPECT_EQ(inner["self_ns"], 80);
    ASSERT_EQ(j["threads"].size(), 2u);
    EXPECT_EQ(j["threads"][0]["tid"], 7);
    EXPECT_EQ(j["threads"][0]["functions"][0]["calls"], 2);
  }
}

TEST_F(Replay, FiltersByThreadFunctionTimeAndDepth) {
  Filter only8;
  only8.tids = {8};
  EXPECT_EQ(tree(json, only8).find("[     7]"), std::string::npos);
  Filter shallow;
  shallow.max_depth = 1;
  std::string s = tree(ctf, shallow);
  EXPECT_EQ(s.find("inner(3, 4)"), std::string::npos) << s;
  EXPECT_NE(s.find("    0.200 us [     7] | outer(1, 2) = 9;"), std::string::npos) << s;
  Filter inner;
  inner.functions = {"inner"};
  s = tree(json, inner);
  EXPECT_NE(s.find("    0.050 us [     7] | inner(3, 4) = 7;"), std::string::npos) << s;
  EXPECT_EQ(s.find("outer("), std::string::npos) << s;
  Filter late;  // 500 ns after the first call (at 1000) on
  late.from_ns = 500;
  s = tree(json, late);
  EXPECT_EQ(s.find("outer(1, 2)"), std::string::npos) << s;
  EXPECT_NE(s.find("| outer(0, 0) {"), std::string::npos) << s;
}

TEST_F(Replay, NotARecordingIsAUsageErrorNamingThePath) {
  Collected c(true);
  EXPECT_THROW(read_recording(dir / "missing.json", c), UsageError);
  std::ofstream(dir / "words.txt") << "hello\n";
  EXPECT_THROW(read_recording(dir / "words.txt", c), UsageError);
  std::ofstream(dir / "other.json") << "{\"a\": [1, 2]}\n";
  EXPECT_THROW(read_recording(dir / "other.json", c), UsageError);
  std::ofstream(dir / "empty.json");
  EXPECT_THROW(read_recording(dir / "empty.json", c), UsageError);
  fs::create_directory(dir / "empty-dir");
  try {
    read_recording(dir / "empty-dir", c);
    ADD_FAILURE() << "an empty directory read";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("empty-dir"), std::string::npos) << e.what();
  }
}

TEST_F(Replay, ACutShortRecordingIsAnErrorSayingWhere) {
  fs::resize_file(json, fs::file_size(json) / 2);
  Collected c(true);
  try {
    read_recording(json, c);
    ADD_FAILURE() << "a truncated file read";
  } catch (const UsageError& e) {
    ADD_FAILURE() << "a usage error: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut short"), std::string::npos) << e.what();
  }
  fs::path stream = fs::path(ctf) / "thread-100-7";
  fs::resize_file(stream, fs::file_size(stream) - 3);
  Collected d(true);
  try {
    read_recording(ctf, d);
    ADD_FAILURE() << "a truncated stream read";
  } catch (const UsageError& e) {
    ADD_FAILURE() << "a usage error: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("thread-100-7"), std::string::npos) << e.what();
  }
}

TEST(ReplayText, ValuesAndDurations) {
  EXPECT_EQ(value_text(5), "5");
  EXPECT_EQ(value_text(static_cast<std::uint64_t>(-12)), "-12");
  EXPECT_EQ(value_text(0x7ffd12345678), "0x7ffd12345678");
  EXPECT_EQ(duration_text(51), "0.051 us");
  EXPECT_EQ(duration_text(2'500'000), "2.500 ms");
  EXPECT_EQ(duration_text(3'000'000'000), "3.000  s");
}

}  // namespace
}  // namespace probecost::replay
