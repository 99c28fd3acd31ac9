#pragma once
// The harness of the trace tests: serve_target driven on stdin (Target), a running probecost
// command (Running), such as `probecost trace -f json -o FILE` (Trace), and checks on a live
// process.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace probecost::test {

using Json = nlohmann::json;

inline std::string read_line(FILE* f) {
  char buf[4096];
  if (!std::fgets(buf, sizeof buf, f)) return "<eof>";
  std::string s(buf);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

inline pid_t spawn(const std::vector<std::string>& argv, int in, int out, int err) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) ::dup2(out, 1);
    if (err >= 0) ::dup2(err, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

// serve_target, talked to line by line.
class Target {
 public:
  Target(const std::string& path, int threads)
      : Target(std::vector<std::string>{path, std::to_string(threads)}) {}
  // serve_target as `argv` starts it (argv[0] may be a program that execs it).
  explicit Target(const std::vector<std::string>& argv) {
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid = spawn(argv, in[0], out[1], -1);
    ::close(in[0]);
    ::close(out[1]);
    in_ = in[1];
    out_ = ::fdopen(out[0], "r");
    ready_line = read_line(out_);
  }
  ~Target() {
    if (pid > 0 && !reaped_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    ::close(in_);
    std::fclose(out_);
  }
  std::string ask(const std::string& cmd) {
    std::string line = cmd + "\n";
    EXPECT_EQ(::write(in_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    return read_line(out_);
  }
  int wait_exit() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    reaped_ = true;
    return status;
  }
  pid_t pid = -1;
  std::string ready_line;

 private:
  int in_ = -1;
  FILE* out_ = nullptr;
  bool reaped_ = false;
};

// A running probecost command, its stderr on a pipe, ready once it says "tracing process";
// killed and reaped if the test never finishes it.
class Running {
 public:
  explicit Running(const std::vector<std::string>& args) {
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
  ~Running() {
    if (!reaped_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    std::fclose(err_);
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
  // Sends `sig` (0: none, it ends by itself) and returns probecost's exit code.
  int finish(int sig = SIGINT) {
    if (sig) ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    reaped_ = true;
    for (std::string line; (line = read_line(err_)) != "<eof>";) stderr_text += line + "\n";
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  pid_t pid = -1;
  bool ready = false;
  std::string stderr_text;

 private:
  FILE* err_ = nullptr;
  bool reaped_ = false;
};

// A running `probecost trace ... -f json -o FILE`.
class Trace : public Running {
 public:
  explicit Trace(std::vector<std::string> args) : Trace(temp_file(), std::move(args)) {}
  ~Trace() { ::unlink(json_path.c_str()); }
  Json report() const {
    std::ifstream in(json_path);
    return Json::parse(in);
  }
  std::string json_path;

 private:
  Trace(std::string path, std::vector<std::string> args)
      : Running(with_output(path, std::move(args))), json_path(std::move(path)) {}
  static std::string temp_file() {
    char path[] = "/tmp/probecost-trace-XXXXXX";
    ::close(::mkstemp(path));
    return path;
  }
  static std::vector<std::string> with_output(const std::string& path,
                                              std::vector<std::string> args) {
    args.insert(args.begin(), {PROBECOST_BIN, "trace", "-f", "json", "-o", path});
    return args;
  }
};

// The `n` bytes at `addr` in the live process equal those of the ELF file mapped there.
inline void expect_text_matches_file(pid_t pid, std::uint64_t addr, std::size_t n = 16) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    std::uint64_t start, end, offset;
    char perms[8], path[512] = "";
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %*s %*u %511s", &start, &end, perms, &offset,
                    path) < 4 ||
        addr < start || addr >= end) {
      continue;
    }
    ASSERT_NE(path[0], '\0') << line;
    std::vector<char> live(n), file(n);
    int mem = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY);
    ASSERT_EQ(::pread(mem, live.data(), n, static_cast<off_t>(addr)), static_cast<ssize_t>(n));
    ::close(mem);
    int elf = ::open(path, O_RDONLY);
    ASSERT_EQ(::pread(elf, file.data(), n, static_cast<off_t>(addr - start + offset)),
              static_cast<ssize_t>(n));
    ::close(elf);
    EXPECT_EQ(live, file) << "text at 0x" << std::hex << addr << " differs from " << path;
    return;
  }
  FAIL() << "no mapping holds 0x" << std::hex << addr;
}

inline std::uint64_t address_of(const Json& probe) {
  return std::stoull(probe["address"].get<std::string>(), nullptr, 16);
}

inline char proc_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  return close == std::string::npos ? '?' : stat[close + 2];
}

// Polls a condition the kernel changes asynchronously (a process state), up to 10 s.
template <typename F>
bool eventually(F&& f) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!f()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    sched_yield();
  }
  return true;
}

}  // namespace probecost::test
