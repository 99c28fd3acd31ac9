#include "tracer/int3/guard_loop.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/semaphore_table.hpp"
#include "tracer/int3/file_identity.hpp"
#include "tracer/os/maps.hpp"

namespace probecost::guard {

namespace {

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

// The process's mappings now, from its /proc/PID/maps opened at the start (a seq_file: read
// again from offset 0, it describes the address space as it is).
std::vector<Mapping> mappings_now(int maps) {
  std::string text;
  char buf[4096];
  for (off_t at = 0;;) {
    ssize_t n = ::pread(maps, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  return parse_maps(text);
}

// Whether the code at the site is still the code our int3 went into.
bool same_code(const std::vector<Mapping>& maps, const Message& s) {
  if (s.code == trap::FileIdentity{}) return true;  // anonymous: nothing to tell it by
  RuntimeAddr at(s.address);
  for (const Mapping& m : maps) {
    if (m.contains(at)) return file_identity(m, at) == s.code;
  }
  return false;  // unmapped
}

// The record of a raise in the process's table, marked lowered if it still says raised (the
// byte is the process's to write too: only that one value is replaced).
void mark_lowered(int mem, const Message& s) {
  std::uint8_t state = 0;
  auto off = static_cast<off_t>(s.record);
  if (s.record && ::pread(mem, &state, 1, off) == 1 && state == sema::kRaised) {
    state = sema::kLowered;
    [[maybe_unused]] ssize_t n = ::pwrite(mem, &state, 1, off);
  }
}

// Each semaphore still in the data it was raised in, and not zero, one lower.
int lower_semaphores(int mem, const std::vector<Mapping>& maps, const std::vector<Message>& sems) {
  int lowered = 0;
  for (const Message& s : sems) {
    std::uint16_t v = 0;
    auto off = static_cast<off_t>(s.address);
    if (!same_code(maps, s) || ::pread(mem, &v, 2, off) != 2 || v == 0) continue;
    mark_lowered(mem, s);  // first: a death between the two never lowers it twice
    --v;
    if (::pwrite(mem, &v, 2, off) == 2) ++lowered;
  }
  return lowered;
}

// The guardian's whole life: collect the sites, and if the pipe ends without 'D', put back
// every byte that still holds our int3 in the code it was written into.
[[noreturn]] void guard(pid_t pid, int in, int mem, int maps_fd) {
  std::vector<Message> sites, semaphores;
  Message m;
  while (read_message(in, m)) {
    if (m.kind == 'D') ::_exit(0);
    if (m.kind == 'S') {
      semaphores.push_back(m);
    } else if (m.kind == 'R') {
      std::erase_if(semaphores, [&](const Message& s) { return s.address == m.address; });
    } else {
      sites.push_back(m);
    }
  }
  std::vector<Mapping> maps = mappings_now(maps_fd);
  int lowered = lower_semaphores(mem, maps, semaphores);
  int restored = 0, gone = 0, other = 0;
  for (const Message& s : sites) {
    std::uint8_t byte = 0;
    auto off = static_cast<off_t>(s.address);
    // 0 bytes read: the address space is gone (the process died first).
    if (::pread(mem, &byte, 1, off) != 1) {
      ++gone;
    } else if (byte != 0xCC || !same_code(maps, s)) {
      ++other;
    } else if (::pwrite(mem, &s.original, 1, off) == 1) {
      ++restored;
    }
  }
  char note[200];
  int len =
      std::snprintf(note, sizeof note,
                    gone ? "probecost guardian: probecost ended without restoring process %d, "
                           "and the process is gone\n"
                         : "probecost guardian: probecost ended without restoring process %d; "
                           "put back %d int3 byte(s), left %d that are no longer ours; lowered "
                           "%d USDT semaphore(s)\n",
                    pid, restored, other, lowered);
  if (len > 0) [[maybe_unused]]
    ssize_t w = ::write(2, note, static_cast<std::size_t>(len));
  ::_exit(0);
}

// Every descriptor from 3 up but `keep`, whatever the limit: close_range(2) (Linux 5.9) between
// the kept ones, a range per call (a close(2) per number up to 1024 was 1,500 system calls on
// the other CPU while the attach held the program, and left a descriptor above 1024 open).
void close_all_but(std::initializer_list<int> keep) {
  std::array<int, 8> kept{};  // no allocation in a forked child
  std::size_t n = std::min(keep.size(), kept.size());
  std::copy_n(keep.begin(), n, kept.begin());
  std::sort(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(n));
  unsigned from = 3;
  auto close_up_to = [&](unsigned last) {
    if (from > last) return;
    if (::close_range(from, last, 0) != 0) {
      for (unsigned fd = from; fd <= last && fd < 1024; ++fd) ::close(static_cast<int>(fd));
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    int k = kept[i];
    if (k < 3 || static_cast<unsigned>(k) < from) continue;
    close_up_to(static_cast<unsigned>(k) - 1);
    from = static_cast<unsigned>(k) + 1;
  }
  close_up_to(~0u);
}

}  // namespace

void become_guardian(pid_t pid, int in, int mem, int maps, bool unblock) {
  ::setsid();
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGPIPE, SIGALRM})
    ::signal(sig, SIG_IGN);
  if (unblock) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
  }
  ::prctl(PR_SET_NAME, "probecost-guard");
  close_all_but({in, mem, maps});
  guard(pid, in, mem, maps);
}

}  // namespace probecost::guard
