// Issue 16 §2: probes of libraries that come and go. A probe of a library not loaded yet waits
// for its dlopen; a dlclose ends a probe's sites (its hits kept) and a dlopen of the library
// again probes it again; a different library at the same address is never written into.
// Counts are checked against the target's own count of its calls.
#include <gtest/gtest.h>

#include "tests/support/run_capture.hpp"
#include "tests/trace/trace_harness.hpp"

namespace probecost::test {
namespace {

const std::string kSpec = "libprobecost_dl_1.so:probecost_dl_site";

std::string opened_at(const std::string& reply) {
  EXPECT_EQ(reply.rfind("opened 0x", 0), 0u) << reply;
  return reply.substr(7);
}

const Json* row_of(const Json& report, const std::string& spec) {
  for (const auto& p : report["probes"]) {
    if (p["spec"] == spec) return &p;
  }
  return nullptr;
}

// --via int3 and --via jump alike.
class TraceDlopen : public ::testing::TestWithParam<const char*> {};

TEST_P(TraceDlopen, APendingProbeGoesInAtTheDlopen) {
  Target target({DLOPEN_TARGET});
  Trace trace({"-p", std::to_string(target.pid), "-b", kSpec, "--via", GetParam()});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_NE(trace.stderr_text.find(kSpec + " waits"), std::string::npos) << trace.stderr_text;
  std::string at = opened_at(target.ask(std::string("open ") + DL_LIB_1));
  EXPECT_EQ(target.ask("call 1000"), "calls=1000 wrong=0");
  ASSERT_EQ(trace.finish(), 0) << trace.stderr_text;
  Json r = trace.report();
  const Json* row = row_of(r, kSpec);
  ASSERT_NE(row, nullptr) << r.dump(2);
  EXPECT_EQ((*row)["hits"], 1000u) << r.dump(2);
  EXPECT_EQ((*row)["address"], at);
  EXPECT_EQ((*row)["via"], GetParam());
  EXPECT_TRUE(r["never_probed"].empty()) << r.dump(2);
  expect_text_matches_file(target.pid, std::stoull(at, nullptr, 16));
  EXPECT_EQ(target.ask("call 10"), "calls=1010 wrong=0");
}

TEST_P(TraceDlopen, ADlcloseKeepsTheHitsAndAReopenAddsItsOwn) {
  Target target({DLOPEN_TARGET});
  Trace trace({"-p", std::to_string(target.pid), "-b", kSpec, "--via", GetParam()});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  opened_at(target.ask(std::string("open ") + DL_LIB_1));
  EXPECT_EQ(target.ask("call 1000"), "calls=1000 wrong=0");
  EXPECT_EQ(target.ask("close"), "closed");
  std::string at = opened_at(target.ask(std::string("open ") + DL_LIB_1));
  EXPECT_EQ(target.ask("call 700"), "calls=1700 wrong=0");
  ASSERT_EQ(trace.finish(), 0) << trace.stderr_text;
  Json r = trace.report();
  const Json* row = row_of(r, kSpec);
  ASSERT_NE(row, nullptr) << r.dump(2);
  EXPECT_EQ((*row)["hits"], 1700u) << r.dump(2);
  EXPECT_EQ((*row)["loads"], 2u) << r.dump(2);
  EXPECT_EQ((*row)["unloaded"], false) << r.dump(2);
  EXPECT_EQ(r["hits"], 1700u);
  EXPECT_NE(trace.stderr_text.find("ended after 1000 hits"), std::string::npos)
      << trace.stderr_text;
  expect_text_matches_file(target.pid, std::stoull(at, nullptr, 16));
}

// The case: the probed library dlclose'd, another one dlopen'd at the same address.
// Detaching must not write the old library's bytes into the new one's code.
TEST_P(TraceDlopen, AnotherLibraryAtTheSameAddressIsNeverWrittenInto) {
  Target target({DLOPEN_TARGET});
  Trace trace({"-p", std::to_string(target.pid), "-b", kSpec, "--via", GetParam()});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  std::string first = opened_at(target.ask(std::string("open ") + DL_LIB_1));
  EXPECT_EQ(target.ask("call 1000"), "calls=1000 wrong=0");
  EXPECT_EQ(target.ask("close"), "closed");
  std::string second = opened_at(target.ask(std::string("open ") + DL_LIB_2));
  ASSERT_EQ(first, second) << "the kernel put the second library elsewhere";
  EXPECT_EQ(target.ask("call 1000"), "calls=2000 wrong=0");
  ASSERT_EQ(trace.finish(), 0) << trace.stderr_text;
  EXPECT_EQ(target.ask("call 1000"), "calls=3000 wrong=0");
  expect_text_matches_file(target.pid, std::stoull(second, nullptr, 16));
  Json r = trace.report();
  const Json* row = row_of(r, kSpec);
  ASSERT_NE(row, nullptr) << r.dump(2);
  EXPECT_EQ((*row)["hits"], 1000u) << r.dump(2);
  EXPECT_EQ((*row)["unloaded"], true) << r.dump(2);
}

INSTANTIATE_TEST_SUITE_P(Via, TraceDlopen, ::testing::Values("int3", "jump"));

// Launched: the probe waits for the program's own dlopen, then counts every call.
TEST(TraceDlopenLaunched, CountsWhatTheProgramCounted) {
  auto r = run_command({PROBECOST_BIN, "trace", "-q", "-f", "json", "-b", kSpec, "--",
                        DLOPEN_TARGET, std::string("open ") + DL_LIB_1, "call 300", "close",
                        std::string("open ") + DL_LIB_1, "call 200"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("calls=500 wrong=0"), std::string::npos) << r.out;
  Json report = Json::parse(r.err.substr(r.err.find('{')));
  const Json* row = row_of(report, kSpec);
  ASSERT_NE(row, nullptr) << report.dump(2);
  EXPECT_EQ((*row)["hits"], 500u) << report.dump(2);
  EXPECT_EQ((*row)["loads"], 2u);
}

// With -F, a child that execs the program and dlopens the library later.
TEST(TraceDlopenLaunched, FollowsForksToADlopenInAChild) {
  std::string spec = std::string(DL_LIB_1) + ":probecost_dl_site";
  auto r =
      run_command({PROBECOST_BIN, "trace", "-q", "-F", "-f", "json", "-b", spec, "--", "/bin/sh",
                   "-c", std::string(DLOPEN_TARGET) + " 'open " + DL_LIB_1 + "' 'call 400'"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("calls=400 wrong=0"), std::string::npos) << r.out;
  Json report = Json::parse(r.err.substr(r.err.find('{')));
  EXPECT_EQ(report["hits"], 400u) << report.dump(2);
}

// A module that exists nowhere is a typo, not a library to wait for.
TEST(TraceDlopenLaunched, AModuleFoundNowhereIsStillAnError) {
  auto r = run_command(
      {PROBECOST_BIN, "trace", "-q", "-b", "libnope.so.7:crc32", "--", DLOPEN_TARGET, "exit"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no module 'libnope.so.7'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace probecost::test
