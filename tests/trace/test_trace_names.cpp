// `probecost trace` with functions and modules named as users name them: C++ functions by their
// demangled names (every overload, one overload, a method), a library by its SONAME or its file
// name, a symbol version, an unknown module, and an executable or a library run from a memfd.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_capture.hpp"
#include "trace_harness.hpp"

using namespace probecost::test;

namespace {

struct TracedRun {
  Result result;
  Json report;
  // Hits by the probe's symbol, over every row.
  std::map<std::string, std::uint64_t> hits() const {
    std::map<std::string, std::uint64_t> out;
    for (const auto& p : report["probes"]) out[p["symbol"]] += p["hits"].get<std::uint64_t>();
    return out;
  }
};

// probecost trace -q -f json with `args` (options, then "--" and the command).
TracedRun trace_json(const std::vector<std::string>& args) {
  char path[] = "/tmp/probecost-names-XXXXXX";
  ::close(::mkstemp(path));
  std::vector<std::string> argv = {PROBECOST_BIN, "trace", "-q", "-f", "json", "-o", path};
  argv.insert(argv.end(), args.begin(), args.end());
  TracedRun run{run_command(argv), {}};
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  if (run.result.exit_code == 0 && !text.str().empty()) run.report = Json::parse(text.str());
  return run;
}

const char* kCounts =
    "middle(long)=10 middle(int)=20 middle(double)=30 method(long)=40 method()=50 a::twin=60 "
    "b::twin=70 soname=80";

}  // namespace

// Every overload of a name, a method's overloads, and one function by its whole name: each
// counted exactly, each row named by its demangled signature; the program's output unchanged.
TEST(TraceNames, CxxFunctionsByTheirDemangledNames) {
  auto untraced = run_command({CXX_NAMES, "10"});
  ASSERT_EQ(untraced.exit_code, 0) << untraced.err;
  ASSERT_EQ(untraced.out.rfind(kCounts, 0), 0u) << untraced.out;
  auto all = trace_json(
      {"-b", "middle", "-b", "ns::Klass::method", "-b", "a::twin", "--", CXX_NAMES, "10"});
  ASSERT_EQ(all.result.exit_code, 0) << all.result.err;
  EXPECT_EQ(all.result.out, untraced.out);
  EXPECT_EQ(all.hits(), (std::map<std::string, std::uint64_t>{{"middle(long)", 10},
                                                              {"middle(int)", 20},
                                                              {"middle(double)", 30},
                                                              {"ns::Klass::method(long)", 40},
                                                              {"ns::Klass::method() const", 50},
                                                              {"a::twin()", 60}}))
      << all.report.dump(2);
  auto one = trace_json({"-b", "middle(long)", "-b", "Klass::method() const", "-b", "_Z6middlei",
                         "-b", "b::twin()", "--", CXX_NAMES, "10"});
  ASSERT_EQ(one.result.exit_code, 0) << one.result.err;
  EXPECT_EQ(one.hits(), (std::map<std::string, std::uint64_t>{{"middle(long)", 10},
                                                              {"middle(int)", 20},
                                                              {"ns::Klass::method() const", 50},
                                                              {"b::twin()", 70}}))
      << one.report.dump(2);
}

TEST(TraceNames, ANameOfSeveralFunctionsIsRefusedWithThem) {
  auto r = run_command({PROBECOST_BIN, "trace", "-q", "-b", "twin", "--", CXX_NAMES, "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("names several functions"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a::twin()"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("b::twin()"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "") << "the command must not have run";
}

TEST(TraceNames, ListShowsDemangledNames) {
  auto r = run_command({PROBECOST_BIN, "trace", "--list", "middle*", "--", CXX_NAMES, "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {" middle(long) ", " middle(int) ", " middle(double) "}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << r.out;
  }
  EXPECT_EQ(r.out.find("_Z6middle"), std::string::npos) << r.out;
}

TEST(TraceNames, ALibraryIsNamedBySonameOrByFileName) {
  for (const char* module : {"libprobecost_soname.so.1", "libprobecost_soname.so.1.2.3"}) {
    auto r =
        trace_json({"-b", std::string(module) + ":probecost_soname_site", "--", CXX_NAMES, "10"});
    ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
    EXPECT_EQ(r.hits()["probecost_soname_site"], 80u) << r.report.dump(2);
    std::string path = r.report["probes"][0]["module"];
    EXPECT_NE(path.find("libprobecost_soname.so.1.2.3"), std::string::npos) << path;
  }
}

TEST(TraceNames, AnUnknownModuleHasItsOwnMessage) {
  auto r =
      run_command({PROBECOST_BIN, "trace", "-q", "-b", "libnope.so.7:crc32", "--", CXX_NAMES, "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no module 'libnope.so.7' in process"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("libc.so.6"), std::string::npos) << r.err;  // what it has
  EXPECT_EQ(r.err.find("no function symbol"), std::string::npos) << r.err;
}

// memcpy@GLIBC_2.2.5 is a function of its own, which a program linked today never calls.
TEST(TraceNames, ASymbolVersionPicksThatVersion) {
  auto r = trace_json({"-b", "libc.so.6:memcpy", "-b", "libc.so.6:memcpy@GLIBC_2.2.5", "--",
                       IFUNC_CALLS_PIE, "0", "40"});
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
  ASSERT_EQ(r.report["probes"].size(), 2u) << r.report.dump(2);
  EXPECT_EQ(r.hits()["memcpy"], 40u) << r.report.dump(2);
  EXPECT_EQ(r.hits()["memcpy@GLIBC_2.2.5"], 0u) << r.report.dump(2);
}

// fexecve from a memfd: the executable is "/memfd:NAME (deleted)", which no path opens; its
// symbols are read through /proc/PID/exe. Traced by PID, counted exactly, detached intact.
TEST(TraceNames, AnExecutableRunFromAMemfdHasItsSymbols) {
  Target target({MEMFD_RUN, "exec", SERVE_PIE, "1"});
  ASSERT_EQ(target.ready_line, "ready " + std::to_string(target.pid));
  auto list = run_command(
      {PROBECOST_BIN, "trace", "-p", std::to_string(target.pid), "--list", "probecost_test_site"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find(" probecost_test_site memfd:probecost-memfd-target"), std::string::npos)
      << list.out;
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("go 300"), "calls=300");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json r = trace.report();
  ASSERT_EQ(r["probes"].size(), 1u) << r.dump(2);
  EXPECT_EQ(r["probes"][0]["hits"], 300);
  std::string module = r["probes"][0]["module"];
  EXPECT_NE(module.find("/memfd:probecost-memfd-target"), std::string::npos) << module;
  EXPECT_EQ(target.ask("go 10"), "calls=310");
  EXPECT_EQ(target.ask("exit"), "bye");
  EXPECT_EQ(target.wait_exit(), 0);
}

// A library dlopen'd from a memfd is read through /proc/PID/map_files, and named by its SONAME.
TEST(TraceNames, ALibraryLoadedFromAMemfdHasItsSymbols) {
  Target target({MEMFD_RUN, "dlopen", SONAME_LIB, "250"});
  ASSERT_EQ(target.ready_line, "ready " + std::to_string(target.pid));
  Trace trace(
      {"-p", std::to_string(target.pid), "-b", "libprobecost_soname.so.1:probecost_soname_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("go"), "calls=250");
  ASSERT_EQ(target.ask("go"), "calls=500");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json r = trace.report();
  ASSERT_EQ(r["probes"].size(), 1u) << r.dump(2);
  EXPECT_EQ(r["probes"][0]["hits"], 500);
  std::string module = r["probes"][0]["module"];
  EXPECT_NE(module.find("/memfd:probecost-memfd-lib"), std::string::npos) << module;
  EXPECT_EQ(target.ask("go"), "calls=750");
  EXPECT_EQ(target.ask("exit"), "bye");
  EXPECT_EQ(target.wait_exit(), 0);
}
