// probecost overhead -p PID: a running process, measured by its own rate of events. Windows
// with jump probes (the reference) alternate with windows of the mechanism under test; where
// no jump fits, the process's CPU alone is compared (issue 19 §1).
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "overhead_fixture.hpp"

using namespace probecost::test;

namespace {

// A program started for a test, reading its first line (its "ready"); killed at the end.
class Background {
 public:
  // `setup` runs in the child before the exec (a CPU to pin it to, a scheduling class).
  explicit Background(std::vector<std::string> argv, void (*setup)() = nullptr) {
    int out[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      if (setup) setup();
      ::dup2(out[1], 1);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out[1]);
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n') line_ += c;
    ::close(out[0]);
  }
  ~Background() { stop(SIGKILL); }
  // Ends it with `sig` and waits for it: its exit code, -1 when the signal killed it.
  int stop(int sig) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  pid_t pid() const { return pid_; }
  const std::string& line() const { return line_; }

 private:
  pid_t pid_ = 0;
  std::string line_;
};

std::vector<std::string> overhead_p(pid_t pid, const std::string& probe, const std::string& via,
                                    const std::string& cal, const char* duration,
                                    const char* repeat) {
  return {"overhead", "-p",   std::to_string(pid), "-b", probe, "--via", via, "-d", duration,
          "-r",       repeat, "--calibration",     cal,  "-f",  "json"};
}

std::vector<double> read_log(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<double> times;
  for (double t; in.read(reinterpret_cast<char*>(&t), sizeof t);) times.push_back(t);
  return times;
}

double count_between(const std::vector<double>& times, double from, double to) {
  return static_cast<double>(std::upper_bound(times.begin(), times.end(), to) -
                             std::lower_bound(times.begin(), times.end(), from));
}

}  // namespace

TEST(OverheadAttached, AlternatesJumpReferenceAndTracedWindows) {
  Background target({EVENTS_TARGET, "0", "--forever", "--spin", "20000"});
  ASSERT_EQ(target.line(), "ready");
  std::string cal = fixture_calibration();
  Result r = run_probecost(overhead_p(target.pid(), "probecost_event", "int3", cal, "0.3", "2"));
  ::unlink(cal.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["pid"], target.pid());
  EXPECT_TRUE(j["command"].is_null());
  EXPECT_EQ(j["repeat"], 2);
  EXPECT_FALSE(j["partial"].get<bool>());
  EXPECT_EQ(j["reference"]["kind"], "jump");
  EXPECT_EQ(j["reference"]["probes"], Json::array({"probecost_event"}));
  EXPECT_TRUE(j["reference"]["no_jump"].empty());
  EXPECT_TRUE(j["untraced"].is_null());
  EXPECT_EQ(j["mechanism"], "int3-ptrace-fast");
  EXPECT_EQ(j["prediction_error_basis"], "slowdown");
  EXPECT_EQ(j["cannot_know"].size(), 3u);

  // Traced window, then its reference: the reference windows are jump-probed and count hits.
  ASSERT_EQ(j["runs"].size(), 4u);
  std::vector<double> slowdowns, rates, traced_wall, traced_hits;
  for (std::size_t i = 0; i < 4; i += 2) {
    const Json& t = j["runs"][i];
    const Json& u = j["runs"][i + 1];
    ASSERT_TRUE(t["traced"].get<bool>());
    ASSERT_TRUE(u["reference"].get<bool>());
    EXPECT_GT(u["hits"].get<double>(), 0);
    EXPECT_EQ(u["hits"], u["reference_hits"]);
    EXPECT_EQ(t["hits"], t["reference_hits"]);  // one probe: all its hits are the reference's
    EXPECT_LE(u["end_s"].get<double>(), t["start_s"].get<double>());  // reference first
    double s = (u["reference_hits"].get<double>() / u["wall_s"].get<double>()) /
               (t["reference_hits"].get<double>() / t["wall_s"].get<double>());
    slowdowns.push_back(s);
    rates.push_back(t["hits"].get<double>() / t["wall_s"].get<double>() * s);
    traced_wall.push_back(t["wall_s"]);
    traced_hits.push_back(t["hits"]);
  }
  EXPECT_NEAR(j["measured"]["slowdown"]["median"].get<double>(), median(slowdowns), 1e-9);
  EXPECT_NEAR(j["event_rate_per_s"].get<double>(), median(rates), 1e-6);
  // hits and duration_s are the traced windows'.
  EXPECT_EQ(j["hits"].get<double>(), std::llround(median(traced_hits)));
  EXPECT_NEAR(j["duration_s"].get<double>(), median(traced_wall), 1e-12);
  EXPECT_EQ(j["requested_duration_s"], 0.3);
  double fast = predicted(j, "int3-ptrace-fast")["slowdown"];
  EXPECT_NEAR(fast, 1 + j["event_rate_per_s"].get<double>() * 10000 / 1e9, 1e-9);
}

// The client's own log of its requests is the truth: the reference windows count what it did
// meanwhile, and the slowdown is the ratio of its own rates. A window's start is exact (the
// server is held stopped until its probes are in); at its end the probes count on until
// probecost has stopped the server to take them out, which a loaded machine can delay. So each
// count must hold every request the client saw answered in the window, and none it saw after
// that delay; the slowdown must lie between the rates those two counts give.
TEST(OverheadAttached, SlowdownOfAClosedLoopServerIsItsClientsOwn) {
  constexpr double kStopDelay = 0.1;  // s, the most allowed from a window's end to the stop
  constexpr double kInFlight = 1;     // a reply written before the hold, read after it
  std::string log = temp_file("");
  Background pingpong({PINGPONG, "--log", log});
  ASSERT_EQ(pingpong.line().rfind("ready ", 0), 0u) << pingpong.line();
  pid_t server = std::stoi(pingpong.line().substr(6));
  std::string cal = fixture_calibration();
  Result r = run_probecost(overhead_p(server, "pingpong_serve", "int3", cal, "0.8", "2"));
  ::unlink(cal.c_str());
  EXPECT_EQ(pingpong.stop(SIGTERM), 0);
  std::vector<double> times = read_log(log);
  ::unlink(log.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_EQ(j["reference"]["kind"], "jump");
  ASSERT_EQ(j["runs"].size(), 4u);
  // The client's rate in a window: its requests up to the window's end, and up to the stop.
  struct Rates {
    double least, most;
  };
  auto own_rates = [&](const Json& w, const std::string& what) {
    double start = w["start_s"], end = w["end_s"], wall = w["wall_s"];
    double hits = w["reference_hits"];
    double answered = count_between(times, start, end);
    double by_stop = count_between(times, start, end + kStopDelay);
    // Each request is one call of the handler.
    EXPECT_GE(hits + kInFlight, answered) << what << ": a request answered was not counted";
    EXPECT_LE(hits, by_stop + kInFlight) << what << ": counted more than the client saw";
    return Rates{(answered - kInFlight) / wall, (by_stop + kInFlight) / wall};
  };
  std::vector<double> least, most;
  for (std::size_t i = 0; i < 4; i += 2) {
    std::string pair = "pair " + std::to_string(i / 2);
    Rates t = own_rates(j["runs"][i], pair + " traced");
    Rates u = own_rates(j["runs"][i + 1], pair + " reference");
    least.push_back(u.least / t.most);
    most.push_back(u.most / t.least);
  }
  double measured = j["measured"]["slowdown"]["median"];
  EXPECT_GE(measured, median(least));
  EXPECT_LE(measured, median(most));
  // A server waiting on its client does not use more CPU the slower it goes; the cost shows as
  // requests not served, which the slowdown measures.
  EXPECT_GT(measured, 1);
}

// A site too short for a jump: it is left out of the reference, with the reason; where no
// site takes a jump, only the process's CPU is compared, and the report says what it cannot
// know.
TEST(OverheadAttached, WhereNoJumpFitsTheReferenceLeavesTheSiteOut) {
  Background target({EVENTS_TARGET, "0", "--forever", "--spin", "20000", "--tiny"});
  ASSERT_EQ(target.line(), "ready");
  std::string cal = fixture_calibration();
  std::vector<std::string> both =
      overhead_p(target.pid(), "probecost_event", "int3", cal, "0.3", "1");
  both.insert(both.begin() + 1, {"-b", "probecost_tiny"});
  Result r = run_probecost(both);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["reference"]["kind"], "jump");
  EXPECT_EQ(j["reference"]["probes"], Json::array({"probecost_event"}));
  ASSERT_EQ(j["reference"]["no_jump"].size(), 1u);
  EXPECT_EQ(j["reference"]["no_jump"][0]["spec"], "probecost_tiny");
  EXPECT_FALSE(j["reference"]["no_jump"][0]["why"].get<std::string>().empty());
  EXPECT_FALSE(j["measured"]["slowdown"].is_null());
  // Both probes hit once per loop: the traced window's hits at the reference's probe are half.
  const Json& t = j["runs"][0];
  EXPECT_NEAR(t["reference_hits"].get<double>() * 2, t["hits"].get<double>(), 2);

  r = run_probecost(overhead_p(target.pid(), "probecost_tiny", "int3", cal, "0.3", "1"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = Json::parse(r.out);
  EXPECT_EQ(j["reference"]["kind"], "untraced");
  EXPECT_TRUE(j["reference"]["probes"].empty());
  EXPECT_TRUE(j["measured"]["slowdown"].is_null());
  EXPECT_EQ(j["prediction_error_basis"], "extra CPU");
  EXPECT_EQ(j["cannot_know"].size(), 3u);
  EXPECT_NE(j["notes"].dump().find("No jump fits probecost_tiny"), std::string::npos)
      << j["notes"].dump();
  EXPECT_NE(j["cannot_know"].dump().find("no jump fits a probed site"), std::string::npos);
  // A number, unless the window's extra CPU was not above zero (a loaded machine can give the
  // untraced window more CPU than the traced one): then the report says so.
  if (!j["prediction_error_percent"].is_number()) {
    EXPECT_LE(j["measured"]["extra_cpu_percent"]["median"].get<double>(), 0);
    EXPECT_NE(j["explanations"].dump().find("no extra CPU to compare"), std::string::npos)
        << j["explanations"].dump();
  }
  EXPECT_NEAR(j["event_rate_per_s"].get<double>(),
              j["hits"].get<double>() / j["traced"]["wall_s"]["median"].get<double>(), 1e-6);

  // --via jump where no jump fits is refused, as trace refuses it, and the process runs on.
  r = run_probecost(overhead_p(target.pid(), "probecost_tiny", "jump", cal, "0.3", "1"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cannot patch a jump at probecost_tiny"), std::string::npos) << r.err;
  ::unlink(cal.c_str());
  EXPECT_EQ(::kill(target.pid(), 0), 0);
}

// Jump probes never stop a thread: no "why" line may say they do.
TEST(OverheadAttached, WhyLinesMatchTheMechanismUsed) {
  Background target({EVENTS_TARGET, "0", "--forever", "--spin", "20000"});
  ASSERT_EQ(target.line(), "ready");
  std::string cal = fixture_calibration();
  Result r = run_probecost(overhead_p(target.pid(), "probecost_event", "jump", cal, "0.3", "1"));
  ::unlink(cal.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["mechanism"], "jump");
  for (const char* key : {"explanations", "notes"}) {
    std::string text = j[key].dump();
    for (const char* int3_only : {"stop", "int3", "wake-up", "tracer"}) {
      EXPECT_EQ(text.find(int3_only), std::string::npos) << key << ": " << text;
    }
  }
}

namespace {

void on_cpu_0() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  ::sched_setaffinity(0, sizeof set, &set);
}

// On CPU 0 beside a busy loop, as SCHED_IDLE: it gets the CPU now and then.
void starved() {
  on_cpu_0();
  sched_param none{};
  ::sched_setscheduler(0, SCHED_IDLE, &none);
}

}  // namespace

// trace lets a thread go where it stopped, which may be the out-of-line copy of an int3 probe's
// instruction: the thread jumps back to the instruction after the probed one once it runs. A
// process that rarely gets a CPU is let go there at the end of nearly every int3 window, and a
// jump patched over the site before it runs would send it into the middle of the jmp (SIGILL,
// SIGSEGV): overhead waits for every thread to run between windows.
TEST(OverheadAttached, AStarvedProcessLivesThroughJumpWindowsAfterInt3Windows) {
  Background hog({"/bin/sh", "-c", "echo busy; while :; do :; done"}, on_cpu_0);
  ASSERT_EQ(hog.line(), "busy");
  Background target({EVENTS_TARGET, "0", "--forever", "--spin", "2000", "--push"}, starved);
  ASSERT_EQ(target.line(), "ready");
  std::string cal = fixture_calibration();
  Result r =
      run_probecost(overhead_p(target.pid(), "probecost_push_event", "int3", cal, "0.2", "2"));
  ::unlink(cal.c_str());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(::kill(target.pid(), 0), 0) << "the target died: " << r.err;
  int status = 0;
  EXPECT_EQ(::waitpid(target.pid(), &status, WNOHANG), 0) << "status " << status;
}
