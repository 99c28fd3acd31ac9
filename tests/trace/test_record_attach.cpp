// `probecost record -p PID`: the ways out (SIGINT, SIGTERM, --duration) leave the process
// running as before, its text as its file holds it, and the trace complete; bad input exits 2
// before anything is touched.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "run_capture.hpp"
#include "trace_harness.hpp"

namespace probecost::test {
namespace {

namespace fs = std::filesystem;

// A running `probecost record -p PID ... -o DIR/t.json --summary-json DIR/s.json`, ready once
// it says "tracing process".
class RecordRun {
 public:
  RecordRun(pid_t target, std::vector<std::string> extra) {
    char tmpl[] = "/tmp/probecost-record-XXXXXX";
    dir = ::mkdtemp(tmpl);
    std::vector<std::string> args = {PROBECOST_BIN,          "record",       "-p",
                                     std::to_string(target), "-o",           dir + "/t.json",
                                     "--summary-json",       dir + "/s.json"};
    args.insert(args.end(), extra.begin(), extra.end());
    int err[2];
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    pid = spawn(args, -1, -1, err[1]);
    ::close(err[1]);
    err_ = ::fdopen(err[0], "r");
    for (std::string line; (line = read_line(err_)) != "<eof>";) {
      stderr_text += line + "\n";
      if (line.find("tracing process") != std::string::npos) {
        ready = true;
        break;
      }
    }
  }
  ~RecordRun() {
    if (!reaped_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    std::fclose(err_);
    fs::remove_all(dir);
  }
  int finish(int sig) {
    if (sig) ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    reaped_ = true;
    for (std::string line; (line = read_line(err_)) != "<eof>";) stderr_text += line + "\n";
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  Json json(const std::string& name) const {
    std::ifstream in(dir + "/" + name);
    return Json::parse(in);
  }
  pid_t pid = -1;
  bool ready = false;
  std::string dir, stderr_text;

 private:
  FILE* err_ = nullptr;
  bool reaped_ = false;
};

// Every executable mapping of the target's own file holds the file's bytes.
void expect_text_intact(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  int checked = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("r-xp") == std::string::npos || line.find("calls_target") == std::string::npos)
      continue;
    std::uint64_t start = std::stoull(line, nullptr, 16);
    std::uint64_t end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    expect_text_matches_file(pid, start, end - start);
    ++checked;
  }
  EXPECT_EQ(checked, 1);
}

std::string serve_sum(long k) {
  long s = 0;
  for (long i = 0; i < k; ++i) s += i + 3;
  return std::to_string(s);
}

void record_and_leave(int sig, std::vector<std::string> extra) {
  Target target(std::vector<std::string>{CALLS_TARGET, "serve"});
  ASSERT_EQ(target.ready_line, "ready");
  extra.insert(extra.begin(), {"-b", "add3", "--args", "2"});
  RecordRun rec(target.pid, extra);
  ASSERT_TRUE(rec.ready) << rec.stderr_text;
  EXPECT_EQ(target.ask("1000"), serve_sum(1000));
  EXPECT_EQ(rec.finish(sig), 0) << rec.stderr_text;
  // Untraced from here on, and unharmed.
  EXPECT_EQ(target.ask("10"), serve_sum(10));
  expect_text_intact(target.pid);
  Json p = rec.json("s.json")["probes"][0];
  EXPECT_EQ(p["calls"], 1000u) << p.dump();
  EXPECT_EQ(p["returns"], 1000u) << p.dump();
  Json trace = rec.json("t.json");
  std::size_t x = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["args"]["arg1"], 1);
    EXPECT_EQ(e["args"]["ret"], e["args"]["arg0"].get<long>() + 3);
    ++x;
  }
  EXPECT_EQ(x, 1000u);
  EXPECT_NE(rec.stderr_text.find("@latency_ns[add3]"), std::string::npos) << rec.stderr_text;
}

TEST(RecordAttach, SigintLeavesTheProcessIntact) {
  record_and_leave(SIGINT, {});
}

TEST(RecordAttach, SigtermLeavesTheProcessIntact) {
  record_and_leave(SIGTERM, {});
}

TEST(RecordAttach, DurationEndsIt) {
  // A generous duration: the process answers within it; probecost then ends by itself.
  record_and_leave(0, {"--duration", "2"});
}

TEST(RecordAttach, BadInputExits2Untouched) {
  Target target(std::vector<std::string>{CALLS_TARGET, "serve"});
  std::string pid = std::to_string(target.pid);
  std::vector<std::vector<std::string>> bad = {
      {"-b", "add3"},                                                 // no -o
      {"-b", "add3", "-o", "/nonexistent/dir/t.json"},                // unwritable
      {"-b", "add3", "-o", "/tmp/t.json", "--args", "7"},             // too many arguments
      {"-b", "add3", "-o", "/tmp/t.json", "--format", "xml"},         // no such format
      {"-o", "/tmp/t.json"},                                          // no probe
      {"-b", "no_such_function", "-o", "/tmp/probecost-never.json"},  // names nothing
      {"-b", "add3", "-o", "/proc/version"},               // a CTF directory that is a file
      {"-b", "add3", "-o", "/tmp", "--format", "ctf"},     // a directory in use
      {"-b", "add3", "-o", "/proc/probecost-never.json"},  // the kernel's file system
      {"-b", "add3", "-o", "/proc/probecost-never-ctf"},   // likewise, for a CTF directory
      {"-b", "add3", "-o", "/tmp/probecost-never.json", "--summary-json", "/proc/version"},
      {"-b", "add3", "-o", "/tmp", "--format", "chrome"},  // a directory for a file
      {"-b", "add3", "-o", "/tmp/probecost-never.json", "--buffer-size", "16K"},  // too small
      {"-b", "add3", "-o", "/tmp/probecost-never.json", "--buffer-size", "2G"},   // too big
      {"-b", "add3", "-o", "/tmp/probecost-never.json", "--buffer-size", "4X"},   // no such unit
      {"-b", "add3", "-o", "/tmp/probecost-never.json", "--buffer-size", "-1M"},
  };
  for (auto args : bad) {
    args.insert(args.begin(), {PROBECOST_BIN, "record", "-p", pid});
    Result r = run_command(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.err;
    EXPECT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find("tracing process"), std::string::npos) << r.err;  // never attached
    EXPECT_EQ(target.ask("5"), serve_sum(5));
  }
  expect_text_intact(target.pid);
  EXPECT_FALSE(fs::exists("/tmp/probecost-never.json"));
}

}  // namespace
}  // namespace probecost::test
