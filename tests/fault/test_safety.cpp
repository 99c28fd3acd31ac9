// Issue 16 §4-§5 end to end on the fault suite's targets: what probecost leaves in a process it
// traced and let go (nothing: no record of ours still installed, the program's own SIGTRAP
// handler), and what it says at a site that holds someone else's int3.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "harness.hpp"
#include "traced.hpp"

namespace {

fault::Config config() {
  fault::Config cfg;
  cfg.probecost = PROBECOST_BIN;
  cfg.bin_dir = FAULT_BIN_DIR;
  cfg.restore_available = true;
  return cfg;
}

// `probecost restore -p PID -f json ARGS`, its report (an empty object if it failed).
nlohmann::json restore(const fault::Config& cfg, pid_t pid, std::vector<std::string> more = {}) {
  fault::Pipe out;
  fault::SpawnFds fds;
  fds.out = out.write;
  std::vector<std::string> argv = {cfg.probecost,       "restore", "-p",
                                   std::to_string(pid), "-f",      "json"};
  argv.insert(argv.end(), more.begin(), more.end());
  fault::Child c(argv, fds);
  out.close_write();
  fault::LineReader lines(out.read);
  while (lines.next(fault::after(30))) {
  }
  auto status = c.wait(fault::after(30));
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) return nlohmann::json::object();
  return nlohmann::json::parse(lines.seen(), nullptr, false);
}

fault::Cycle cycle(const std::string& strategy) {
  static std::mt19937_64 rng(1);
  fault::Cycle c;
  c.strategy = strategy;
  c.rng = &rng;
  return c;
}

// A clean detach leaves nothing for restore: every record says its int3 is out, the program's
// SIGTRAP handler is its own again (the end line's sigtrap=own), the text is the file's.
TEST(Int3Area, ACleanDetachLeavesNothingBehind) {
  fault::Config cfg = config();
  for (const char* strategy : {"auto", "singlestep", "emulate", "outline"}) {
    auto t =
        fault::Traced::attach(cfg, cycle(strategy), {"fault_busy", "--threads", "2", "--idle"});
    ASSERT_TRUE(t.wait_traced(fault::after(30))) << t.run().stderr_text();
    t.pipes().send("go 50");
    ASSERT_TRUE(t.pipes().wait_line("done", fault::after(30)));
    t.run().signal(SIGINT);
    fault::Outcome o;
    auto report = t.run().finish(fault::after(30), o, "SIGINT");
    ASSERT_TRUE(report) << o.why;
    nlohmann::json r = restore(cfg, t.pid(), {"--dry-run"});
    ASSERT_TRUE(r.contains("bytes")) << "restore failed";
    for (const auto& b : r["bytes"]) EXPECT_FALSE(b["ours"].get<bool>()) << b.dump();
    EXPECT_TRUE(r["handlers"].empty()) << r.dump();
    t.check_attached(cfg, o);
    EXPECT_TRUE(o.clean()) << strategy << ": " << o.why;
  }
}

// An int3 that probecost did not write (here the program's own hook) is someone else's: trace
// refuses the site saying so, and does not send the user to `probecost restore`.
TEST(Int3Area, SomeoneElsesInt3IsNamedSo) {
  fault::Config cfg = config();
  auto target = fault::start_target(cfg, {"fault_foreign", "--threads", "1"});
  ASSERT_TRUE(target->wait_line("sites", fault::after(30)));
  fault::TraceRun run(cfg, {"-p", std::to_string(target->pid), "-b", "own_hook", "--via", "int3"});
  fault::Outcome o;
  run.finish(fault::after(30), o, "a refusal", {1, 2});
  const std::string& err = run.stderr_text();
  EXPECT_NE(err.find("someone else's breakpoint"), std::string::npos) << err;
  EXPECT_EQ(err.find("probecost restore"), std::string::npos) << err;
  target->send("go 5");
  auto done = target->wait_line("done", fault::after(30));
  ASSERT_TRUE(done);
  EXPECT_NE(done->find("hook=4242"), std::string::npos) << *done;
}

}  // namespace

// record's trampolines wake the drain and wait for it with shared futex calls: a program whose
// seccomp filter kills on them died of SIGSYS at the first full sub-buffer (main at 9618bb5,
// 2 of 2). Under seccomp the trampolines make no system call (the drain polls): the program
// runs on, and every record is written or counted lost.
TEST(RecordSafety, ASeccompFilterOnSharedFutexCallsIsNeverMet) {
  fault::Config cfg = config();
  auto target = fault::start_target(
      cfg, {"fault_busy", "--threads", "2", "--idle", "--seccomp", "futex-shared:kill"});
  ASSERT_TRUE(target);
  char dir[] = "/tmp/probecost-seccomp-record-XXXXXX";
  ASSERT_TRUE(::mkdtemp(dir));
  std::string out = std::string(dir) + "/t.json", summary = std::string(dir) + "/s.json";
  fault::Pipe err;
  fault::SpawnFds fds;
  fds.err = err.write;
  fault::Child record({cfg.probecost, "record", "-p", std::to_string(target->pid), "-b", "probe_fn",
                       "-m", "64K", "-o", out, "--summary-json", summary},
                      fds);
  err.close_write();
  fault::LineReader lines(err.read);
  bool tracing = false;
  for (auto until = fault::after(60); !tracing;) {
    auto line = lines.next(until);
    if (!line) break;
    tracing = line->find("tracing process") != std::string::npos;
  }
  ASSERT_TRUE(tracing) << lines.seen();
  constexpr int kCalls = 50000;  // per thread: 2 x 64 KiB rings fill many times over
  target->send("go " + std::to_string(kCalls));
  ASSERT_TRUE(target->wait_line("done", fault::after(60))) << target->lines.seen();
  record.signal(SIGINT);
  while (lines.next(fault::after(60))) {
  }
  auto status = record.wait(fault::after(60));
  ASSERT_TRUE(status && WIFEXITED(*status)) << lines.seen();
  EXPECT_EQ(WEXITSTATUS(*status), 0) << lines.seen();
  EXPECT_NE(lines.seen().find("runs under seccomp"), std::string::npos) << lines.seen();
  fault::Outcome o;
  target->send("go 20");
  if (!target->wait_line("done", fault::after(60))) o.harm("the round after record did not end");
  fault::stop_and_check(*target, cfg, o);
  EXPECT_TRUE(o.clean()) << o.why;
  std::ifstream in(summary);
  nlohmann::json s = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(s.contains("probes")) << "no summary";
  const auto& p = s["probes"][0];
  EXPECT_EQ(p["events_written"].get<std::uint64_t>() + p["events_lost"].get<std::uint64_t>(),
            2u * 2u * kCalls)
      << p.dump();
  std::filesystem::remove_all(dir);
}
