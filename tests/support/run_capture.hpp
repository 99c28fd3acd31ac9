#pragma once
// Test helper: run a command to its end with stdout and stderr captured in memory files (no
// pipe to fill up, no deadlock) and an optional stdin.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace probecost::test {

// waitpid that retries on EINTR: a Family alive in this process keeps its Ticker's SIGALRM
// (installed without SA_RESTART, so that the tracer's own waits wake) firing every period.
inline int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

inline std::string read_fd(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  off_t off = 0;
  while ((n = ::pread(fd, buf, sizeof buf, off)) > 0) {
    out.append(buf, n);
    off += n;
  }
  return out;
}

struct MemFile {
  int fd = ::memfd_create("test-capture", MFD_CLOEXEC);
  ~MemFile() { ::close(fd); }
  std::string contents() const { return read_fd(fd); }
};

struct Result {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};

inline Result run_command(const std::vector<std::string>& argv) {
  MemFile out, err;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out.fd, 1);
    ::dup2(err.fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = wait_child(pid);
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = out.contents();
  r.err = err.contents();
  return r;
}

}  // namespace probecost::test
