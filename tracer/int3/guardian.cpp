#include "tracer/int3/guardian.hpp"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <filesystem>
#include <string>

#include "common/error.hpp"
#include "tracer/int3/guard_loop.hpp"

namespace probecost {

namespace {

// probecost-guard: beside the running program (the build tree's bin/, where the tests run too),
// else where it is installed (PROBECOST_GUARD_FROM_BIN, from the bin directory); "" if neither.
const std::string& guard_program() {
  static const std::string path = [] {
    char self[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return std::string();
    std::string dir(self, static_cast<std::size_t>(n));
    dir.erase(dir.rfind('/') + 1);
    for (std::string at : {dir + "probecost-guard", dir + PROBECOST_GUARD_FROM_BIN}) {
      at = std::filesystem::path(at).lexically_normal().string();
      if (::access(at.c_str(), X_OK) == 0) return at;
    }
    return std::string();
  }();
  return path;
}

// probecost-guard started by posix_spawn (a vfork and an exec: none of our pages is ever shared
// with it) with `fds` (the pipe's read end, mem, maps) inherited; its pid, -1 if not started.
pid_t spawn_guard(pid_t pid, std::array<int, 3> fds) {
  const std::string& program = guard_program();
  if (program.empty()) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  // dup2 of a descriptor onto itself clears its FD_CLOEXEC (glibc 2.29): these three go across
  // the exec, our other O_CLOEXEC ones (the pipe's write end first) do not.
  for (int fd : fds) posix_spawn_file_actions_adddup2(&actions, fd, fd);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::array<std::string, 4> text = {std::to_string(pid), std::to_string(fds[0]),
                                     std::to_string(fds[1]), std::to_string(fds[2])};
  std::array<char*, 7> argv = {const_cast<char*>(program.c_str()),
                               const_cast<char*>(guard::kProtocol),
                               text[0].data(),
                               text[1].data(),
                               text[2].data(),
                               text[3].data(),
                               nullptr};
  pid_t child = -1;
  if (::posix_spawn(&child, program.c_str(), &actions, &attr, argv.data(), environ) != 0)
    child = -1;
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return child;
}

// The way left when probecost-guard is not found: a double fork of probecost itself. Every page
// of ours is then shared copy-on-write with the middle process, and our first write to each
// afterwards a page fault (some 50 while the attach holds the program, ~10 us each on a KVM
// guest). The middle process exits at once, so the guardian is re-parented to init.
pid_t fork_guard(pid_t pid, int in, int out, int mem, int maps) {
  pid_t middle = ::fork();
  if (middle != 0) return middle;
  if (::fork() != 0) ::_exit(0);
  ::close(out);
  guard::become_guardian(pid, in, mem, maps, false);
}

// Reaps the middle process; whether it exited 0 (the guardian runs).
bool reaped(pid_t middle) {
  int status = 0;
  while (::waitpid(middle, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

std::unique_ptr<Guardian> Guardian::start(pid_t pid, int mem_fd) {
  std::string maps_path = "/proc/" + std::to_string(pid) + "/maps";
  int maps = ::open(maps_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (maps < 0) throw Error::from_errno("opening " + maps_path + " for the guardian");
  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) {
    ::close(maps);
    throw Error::from_errno("pipe2 for the guardian");
  }
  pid_t spawned = spawn_guard(pid, {p[0], mem_fd, maps});
  if (spawned < 0 || !reaped(spawned)) {
    pid_t middle = fork_guard(pid, p[0], p[1], mem_fd, maps);
    if (middle < 0) {
      Error e = Error::from_errno("fork of the guardian");
      for (int fd : {maps, p[0], p[1]}) ::close(fd);
      throw e;
    }
    reaped(middle);
  }
  ::close(p[0]);
  ::close(maps);
  return std::unique_ptr<Guardian>(new Guardian(p[1]));
}

Guardian::~Guardian() {
  ::close(fd_);  // without done(): the guardian restores, as if we had died
}

void Guardian::watch(RuntimeAddr at, std::uint8_t original, const trap::FileIdentity& code) {
  guard::Message m = {at.value(), original, 'W', {}, code, 0};
  [[maybe_unused]] ssize_t n = ::write(fd_, &m, sizeof m);
}

void Guardian::watch_semaphore(RuntimeAddr at, const trap::FileIdentity& data, RuntimeAddr record) {
  guard::Message m = {at.value(), 0, 'S', {}, data, record.value()};
  [[maybe_unused]] ssize_t n = ::write(fd_, &m, sizeof m);
}

void Guardian::unwatch_semaphore(RuntimeAddr at) {
  guard::Message m = {at.value(), 0, 'R', {}, {}, 0};
  [[maybe_unused]] ssize_t n = ::write(fd_, &m, sizeof m);
}

void Guardian::done() {
  guard::Message m = {0, 0, 'D', {}, {}, 0};
  [[maybe_unused]] ssize_t n = ::write(fd_, &m, sizeof m);
}

}  // namespace probecost
