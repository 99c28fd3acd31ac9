// USDT markers in a recording (record/markers.hpp): which pair, the pairing per thread and
// nested by the markers' string arguments, unbalanced markers counted and never made calls,
// the Chrome JSON's calls named by the entry's name argument, and the summary per marker.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "record/chrome.hpp"
#include "record/markers.hpp"
#include "record/recorder.hpp"
#include "temp_dir.hpp"
#include "tests/record/record_fixtures.hpp"

namespace probecost::record {
namespace {

// python3.11's three markers of a call, and gc__start, as record's tracer side describes them.
RunInfo python_run() {
  RunInfo run = testing::run_of({});
  for (const char* name : {"function__entry", "function__return", "line", "gc__start"}) {
    ProbeInfo p{"usdt:python:*", std::string("python:") + name, "python3.11", 0x1000};
    p.marker = MarkerRole::instant;
    p.marker_args =
        marker_args("python", name, name[0] == 'g' ? "-4@112(%rsp)" : "8@%rbp 8@%r12 -4@%eax");
    run.probes.push_back(p);
  }
  assign_marker_roles(run.probes);
  return run;
}

enum : std::uint32_t { kEntry, kReturn, kLine, kGc };

// A marker hit of thread `tid` at `tsc`: (file, name) interned by `rec`, then `line`.
Event hit(Recorder& rec, std::uint32_t probe, std::int32_t tid, std::uint64_t tsc,
          const std::string& file, const std::string& name, std::uint64_t line) {
  Event e;
  e.kind = EventKind::marker;
  e.probe = probe;
  e.pid = 100;
  e.tid = tid;
  e.tsc = tsc;
  e.args = {rec.intern(file), rec.intern(name), line};
  e.text = 0b011;
  return e;
}

TEST(MarkerRoles, EntryAndReturnPairOnlyWhenBothAreRecorded) {
  RunInfo run = python_run();
  EXPECT_EQ(run.probes[kEntry].marker, MarkerRole::entry);
  EXPECT_EQ(run.probes[kReturn].marker, MarkerRole::exit);
  EXPECT_EQ(run.probes[kLine].marker, MarkerRole::instant);
  EXPECT_EQ(run.probes[kGc].marker, MarkerRole::instant);
  std::vector<ProbeInfo> alone = {run.probes[kReturn]};
  alone[0].marker = MarkerRole::instant;
  assign_marker_roles(alone);
  EXPECT_EQ(alone[0].marker, MarkerRole::instant) << "a return marker without its entry";
  EXPECT_EQ(marker_name_arg(run.probes[kEntry]), 1);
  EXPECT_EQ(run.probes[kGc].marker_args.at(0).name, "generation");
  EXPECT_FALSE(run.probes[kGc].marker_args.at(0).text);
  auto other = marker_args("ruby", "method__entry", "8@%rax 8@%rdx -4@%ecx");
  ASSERT_EQ(other.size(), 3u);
  EXPECT_EQ(other[2].name, "arg2");
  EXPECT_TRUE(other[0].text);
}

// The Chrome JSON of a recording, parsed; and its summary's markers.
struct Recorded {
  nlohmann::json trace;
  nlohmann::json summary;
};

template <typename Feed>
Recorded record_chrome(Feed feed) {
  test::TempDir dir{"probecost-markers"};
  std::string path = dir / "t.json";
  Recorded out;
  {
    Recorder rec(python_run(), TraceFormat::chrome, path);
    feed(rec);
    rec.finish();
    out.summary = rec.summary().json();
  }
  std::ifstream in(path);
  out.trace = nlohmann::json::parse(in);
  return out;
}

const nlohmann::json& marker_row(const nlohmann::json& summary, const std::string& marker) {
  for (const auto& m : summary["markers"])
    if (m["marker"] == marker) return m;
  throw std::runtime_error("no marker " + marker);
}

TEST(MarkerPairing, NestedCallsPerThreadNamedByTheirNameArgument) {
  Recorded r = record_chrome([](Recorder& rec) {
    rec.add(hit(rec, kEntry, 1, 10, "/w.py", "outer", 1));
    rec.add(hit(rec, kEntry, 2, 11, "/w.py", "other", 9));  // another thread, interleaved
    rec.add(hit(rec, kLine, 1, 12, "/w.py", "outer", 2));
    rec.add(hit(rec, kEntry, 1, 20, "/w.py", "inner", 5));
    rec.add(hit(rec, kReturn, 1, 30, "/w.py", "inner", 6));
    rec.add(hit(rec, kReturn, 2, 35, "/w.py", "other", 9));
    rec.add(hit(rec, kReturn, 1, 40, "/w.py", "outer", 3));
  });
  std::map<std::string, nlohmann::json> calls;
  int instants = 0;
  for (const auto& e : r.trace["traceEvents"]) {
    if (e["ph"] == "X") calls[e["name"]] = e;
    if (e["ph"] == "i") ++instants;
  }
  ASSERT_EQ(calls.size(), 3u) << r.trace.dump(1);
  EXPECT_EQ(calls["outer"]["ts"], 0.010);
  EXPECT_EQ(calls["outer"]["dur"], 0.030);
  EXPECT_EQ(calls["inner"]["dur"], 0.010);
  EXPECT_EQ(calls["inner"]["tid"], 1);
  EXPECT_EQ(calls["other"]["tid"], 2);
  EXPECT_EQ(calls["inner"]["cat"], "usdt");
  EXPECT_EQ(calls["inner"]["args"], nlohmann::json({{"file", "/w.py"}, {"line", 5}}));
  EXPECT_EQ(instants, 1) << "python:line";
  const auto& entry = marker_row(r.summary, "python:function__entry");
  EXPECT_EQ(entry["hits"], 3);
  EXPECT_EQ(entry["calls"], 3);
  EXPECT_EQ(entry["unbalanced"], 0);
  EXPECT_EQ(marker_row(r.summary, "python:line")["hits"], 1);
}

// python 3.11: a Python-to-Python call fires function__return without function__entry.
TEST(MarkerPairing, ReturnsWithoutTheirEntryAreCountedNeverMadeCalls) {
  Recorded r = record_chrome([](Recorder& rec) {
    rec.add(hit(rec, kEntry, 1, 10, "/w.py", "<module>", 1));
    for (std::uint64_t i = 0; i < 5; ++i) rec.add(hit(rec, kReturn, 1, 20 + i, "/w.py", "f", 2));
    rec.add(hit(rec, kEntry, 1, 30, "/w.py", "g", 4));  // never returns: an exception
    rec.add(hit(rec, kReturn, 1, 40, "/w.py", "<module>", 9));
    rec.add(hit(rec, kEntry, 1, 50, "/w.py", "open", 7));  // open at the end
  });
  std::vector<std::string> seen;
  for (const auto& e : r.trace["traceEvents"]) {
    if (e["ph"] == "M") continue;
    std::string what = e["ph"].get<std::string>() + " " + e["name"].get<std::string>();
    if (e["args"].contains("unmatched")) what += " unmatched";
    if (e["args"].contains("entry")) what += " orphan";
    seen.push_back(what);
  }
  // In ts order: <module>'s call (from 10) before the returns inside it.
  std::vector<std::string> want = {"X <module>",
                                   "i python:function__return orphan",
                                   "i python:function__return orphan",
                                   "i python:function__return orphan",
                                   "i python:function__return orphan",
                                   "i python:function__return orphan",
                                   "B g unmatched",
                                   "B open unmatched"};
  EXPECT_EQ(seen, want) << r.trace.dump(1);
  const auto& entry = marker_row(r.summary, "python:function__entry");
  EXPECT_EQ(entry["hits"], 3);
  EXPECT_EQ(entry["calls"], 1);
  EXPECT_EQ(entry["unbalanced"], 2);
  const auto& ret = marker_row(r.summary, "python:function__return");
  EXPECT_EQ(ret["hits"], 6);
  EXPECT_EQ(ret["calls"], 1);
  EXPECT_EQ(ret["unbalanced"], 5);
}

TEST(MarkerPairing, TheSummaryPrintsOneRowPerMarker) {
  RunInfo run = python_run();
  run.probes.push_back(run.probes[kLine]);  // a second site of python:line
  Recorder rec(run, std::make_unique<Output>());
  rec.add(hit(rec, kLine, 1, 10, "/w.py", "f", 1));
  rec.add(hit(rec, 4, 1, 11, "/w.py", "f", 2));
  rec.add(hit(rec, kGc, 1, 12, "/w.py", "f", 2));
  rec.finish();
  std::ostringstream out;
  rec.summary().print(out);
  EXPECT_NE(out.str().find("python:line"), std::string::npos) << out.str();
  auto markers = rec.summary().markers();
  ASSERT_EQ(markers.size(), 4u);
  EXPECT_EQ(markers[2].marker, "python:line");
  EXPECT_EQ(markers[2].hits, 2u);
  EXPECT_EQ(markers[2].sites, 2u);
  EXPECT_EQ(out.str().find("min ns"), std::string::npos) << "no function table: " << out.str();
}

TEST(MarkerStrings, InternedOnceAndBounded) {
  Recorder rec(python_run(), std::make_unique<Output>());
  EXPECT_EQ(rec.intern("a"), rec.intern("a"));
  EXPECT_NE(rec.intern("a"), rec.intern("b"));
}

}  // namespace
}  // namespace probecost::record
