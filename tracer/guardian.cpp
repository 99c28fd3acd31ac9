#include "tracer/guardian.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "common/error.hpp"

namespace probecost {

namespace {

struct Message {
  std::uint64_t address;
  std::uint8_t original;
  std::uint8_t kind;  // 'W' watch, 'D' done
  std::uint8_t pad[6];
};
static_assert(sizeof(Message) == 16);  // < PIPE_BUF: every write is atomic

bool read_message(int fd, Message& m) {
  std::size_t got = 0;
  while (got < sizeof m) {
    ssize_t n = ::read(fd, reinterpret_cast<char*>(&m) + got, sizeof m - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

// The guardian's whole life: collect the sites, and if the pipe ends without 'D', put back
// every byte that still holds our int3. Only system calls from here on.
[[noreturn]] void guard(pid_t pid, int in, int mem) {
  std::vector<Message> sites;
  Message m;
  while (read_message(in, m)) {
    if (m.kind == 'D') ::_exit(0);
    sites.push_back(m);
  }
  int restored = 0, gone = 0;
  for (const Message& s : sites) {
    std::uint8_t byte = 0;
    auto off = static_cast<off_t>(s.address);
    // 0 bytes read: the address space is gone (the process died first).
    if (::pread(mem, &byte, 1, off) != 1) {
      ++gone;
    } else if (byte == 0xCC && ::pwrite(mem, &s.original, 1, off) == 1) {
      ++restored;
    }
  }
  char note[160];
  int len =
      std::snprintf(note, sizeof note,
                    gone ? "probecost guardian: probecost ended without restoring process %d, "
                           "and the process is gone\n"
                         : "probecost guardian: probecost ended without restoring process %d; "
                           "put back %d int3 byte(s)\n",
                    pid, restored);
  if (len > 0) [[maybe_unused]]
    ssize_t w = ::write(2, note, static_cast<std::size_t>(len));
  ::_exit(0);
}

void close_all_but(int keep1, int keep2) {
  for (int fd = 3; fd < 1024; ++fd) {
    if (fd != keep1 && fd != keep2) ::close(fd);
  }
}

}  // namespace

std::unique_ptr<Guardian> Guardian::start(pid_t pid, int mem_fd) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) throw Error::from_errno("pipe2 for the guardian");
  pid_t middle = ::fork();
  if (middle < 0) throw Error::from_errno("fork of the guardian");
  if (middle == 0) {
    // The middle process exits at once, so the guardian is re-parented to init and our
    // waitpid(-1, __WALL) never reports it.
    if (::fork() != 0) ::_exit(0);
    ::setsid();
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGPIPE, SIGALRM})
      ::signal(sig, SIG_IGN);
    ::prctl(PR_SET_NAME, "probecost-guard");
    ::close(p[1]);
    close_all_but(p[0], mem_fd);
    guard(pid, p[0], mem_fd);
  }
  ::close(p[0]);
  int status;
  while (::waitpid(middle, &status, 0) < 0 && errno == EINTR) {
  }
  return std::unique_ptr<Guardian>(new Guardian(p[1]));
}

Guardian::~Guardian() {
  ::close(fd_);  // without done(): the guardian restores, as if we had died
}

void Guardian::watch(RuntimeAddr at, std::uint8_t original) {
  Message m = {at.value(), original, 'W', {}};
  [[maybe_unused]] ssize_t n = ::write(fd_, &m, sizeof m);
}

void Guardian::done() {
  Message m = {0, 0, 'D', {}};
  [[maybe_unused]] ssize_t n = ::write(fd_, &m, sizeof m);
}

}  // namespace probecost
