#include "harness.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "run_capture.hpp"
#include "text_check.hpp"

namespace fault {

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

TargetPipes::TargetPipes() : lines(ctl.read) {}

void TargetPipes::send(const std::string& line) {
  std::string l = line + "\n";
  [[maybe_unused]] ssize_t n = ::write(in.write, l.data(), l.size());
}

bool TargetPipes::wait_ready(Deadline deadline) {
  auto line = wait_line("ready ", deadline);
  if (!line) return false;
  pid = static_cast<pid_t>(std::stol(line->substr(6)));
  pidfd = probecost::Fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  return true;
}

void TargetPipes::kill() const {
  if (pidfd) ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
}

std::optional<std::string> TargetPipes::wait_line(const std::string& prefix, Deadline deadline) {
  while (auto line = lines.next(deadline)) {
    if (line->rfind(prefix, 0) == 0) return line;
  }
  return std::nullopt;
}

std::unique_ptr<AttachedTarget> start_target(const Config& cfg, std::vector<std::string> argv) {
  auto t = std::make_unique<AttachedTarget>();
  argv[0] = cfg.bin_dir + "/" + argv[0];
  argv.insert(argv.end(), {"--ctl-fd", "3"});
  SpawnFds fds;
  fds.in = t->in.read;
  fds.ctl = t->ctl.write;
  t->child = Child(argv, fds);
  t->in.close_read();
  t->ctl.close_write();
  if (!t->wait_ready(after(30))) throw std::runtime_error("target " + argv[0] + " never ready");
  return t;
}

std::vector<std::string> trace_args(const std::string& strategy, std::vector<std::string> more) {
  std::vector<std::string> args =
      strategy == "jump" ? std::vector<std::string>{"--via", "jump"}
                         : std::vector<std::string>{"--via", "int3", "--step-over", strategy};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TraceRun::TraceRun(const Config& cfg, const std::vector<std::string>& args, int in, int ctl)
    : err_lines_(err_.read) {
  out_ = ::memfd_create("probecost-report", MFD_CLOEXEC);
  // -o /dev/stdout: the report of a launched command goes to standard error otherwise.
  std::vector<std::string> argv = {cfg.probecost, "trace", "-f", "json", "-o", "/dev/stdout"};
  argv.insert(argv.end(), args.begin(), args.end());
  SpawnFds fds;
  fds.in = in;
  fds.out = out_;
  fds.err = err_.write;
  fds.ctl = ctl;
  child_ = Child(argv, fds);
  err_.close_write();
}

TraceRun::~TraceRun() {
  if (child_.running()) child_.kill();
  ::close(out_);
}

bool TraceRun::wait_tracing(Deadline deadline) {
  while (auto line = err_lines_.next(deadline)) {
    if (line->find("tracing process") != std::string::npos) return true;
  }
  return false;
}

std::vector<double>& handler_window_ms() {
  static std::vector<double> v;
  return v;
}

namespace {

bool catches_stop_signals(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
    auto bit = [](int sig) { return 1ull << (sig - 1); };
    unsigned long long want = bit(SIGINT) | bit(SIGTERM) | bit(SIGHUP);
    return (mask & want) == want;
  }
  return false;
}

}  // namespace

bool TraceRun::wait_handlers(Deadline deadline) {
  if (!poll_until([&] { return catches_stop_signals(child_.pid()); }, deadline)) return false;
  handler_window_ms().push_back(seconds_since(started_) * 1e3);
  return true;
}

const std::string& TraceRun::stderr_text() {
  while (err_lines_.next(after(0.05))) {
  }
  stderr_ = err_lines_.seen();
  return stderr_;
}

std::optional<nlohmann::json> TraceRun::finish(Deadline deadline, Outcome& o,
                                               const std::string& what,
                                               const std::vector<int>& allowed_exit) {
  auto status = child_.wait(deadline);
  if (!status) {
    std::string how = "probecost still running " + what;
    child_.signal(SIGINT);
    status = child_.wait(after(1));
    if (!status) {
      how += ", and it ignored SIGINT";
      child_.kill();
    }
    o.hang(how + " (stderr: " + last_line(stderr_text()) + ")");
    return std::nullopt;
  }
  if (!WIFEXITED(*status)) {
    o.lose("probecost " + describe_status(*status));
    return std::nullopt;
  }
  int code = WEXITSTATUS(*status);
  if (code != 0) {
    for (int ok : allowed_exit) {
      if (ok == code) return std::nullopt;
    }
    o.lose("probecost exited " + std::to_string(code) + ": " + last_line(stderr_text()));
    return std::nullopt;
  }
  try {
    return nlohmann::json::parse(probecost::test::read_fd(out_));
  } catch (const std::exception&) {
    o.lose("probecost exited 0 without a report");
    return std::nullopt;
  }
}

std::optional<EndLine> read_end(TargetPipes& t, Deadline deadline, Outcome& o) {
  auto line = t.wait_line("end", deadline);
  if (!line) return std::nullopt;
  EndLine end;
  std::istringstream in(line->substr(3));
  for (std::string kv; in >> kv;) {
    auto eq = kv.find('=');
    end[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  if (end.count("int3-left-in-text")) o.harm("its SIGTRAP handler met an int3 still in its text");
  return end;
}

void check_end(const EndLine& end, Outcome& o) {
  auto get = [&](const char* k) {
    auto it = end.find(k);
    return it == end.end() ? std::string() : it->second;
  };
  if (end.count("int3-left-in-text")) return;  // said already
  if (get("bad") != "0") o.harm(get("bad") + " wrong results of probe_fn");
  if (get("traps") != "0") {
    o.harm("stray SIGTRAP (" + get("traps") + "; si_code=" + get("trap_code") + " at " +
           get("trap_at") + ")");
  }
  // "traced": it ended while traced (a launched target, an exit); the driver checks the text
  // of an attached target itself after detach.
  if (get("text") != "ok" && get("text") != "traced") {
    o.harm("text differs from the file at its end: " + get("text"));
  }
  if (get("sigtrap").rfind("other", 0) == 0) {
    o.harm("its SIGTRAP disposition is not its own handler after probecost let go of it (" +
           get("sigtrap") + ")");
  }
  std::string failures = get("child_failures");
  if (!failures.empty() && failures != "0") o.harm(failures + " children did not exit 0");
}

void check_text(pid_t pid, Outcome& o, const std::string& when) {
  auto diffs = text_differences(pid, 3);
  if (diffs.empty()) return;
  std::string list;
  for (const auto& d : diffs) list += (list.empty() ? "" : ", ") + d;
  o.harm("int3 bytes left in its text " + when + ": " + list);
}

std::optional<EndLine> stop_and_check(AttachedTarget& t, const Config& cfg, Outcome& o) {
  t.send("stop");
  auto end = read_end(t, after(cfg.bound), o);
  auto status = t.child.wait(after(cfg.bound));
  if (!status) {
    o.harm("did not end when asked to (state " + std::string(1, proc_state(t.child.pid())) + ")");
    t.child.kill();
    return end;
  }
  if (end) check_end(*end, o);
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    o.harm("the target " + describe_status(*status));
  } else if (!end) {
    o.harm("the target ended without its end line");
  }
  return end;
}

void check_command_end(const nlohmann::json& report, Outcome& o) {
  std::string end = report.value("command_end", "");
  if (end.find("exited with status 0") == std::string::npos) o.harm("the command " + end);
}

void check_hits(const nlohmann::json& report, std::uint64_t expected, Outcome& o) {
  o.count_checked = true;
  std::uint64_t hits = report.value("hits", std::uint64_t{0});
  if (hits != expected) {
    o.miscount(std::to_string(hits) + " hits counted, " + std::to_string(expected) + " calls made");
  }
}

bool ptrace_allowed() {
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  bool ok = ::ptrace(PTRACE_SEIZE, child, nullptr, nullptr) == 0;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, __WALL);
  return ok;
}

}  // namespace fault
