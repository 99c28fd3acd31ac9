// A process that forks, vforks, spawns or clones with unusual flags while its other threads
// hit the probe.
//   fault_fork --mode fork|vfork|spawn|clone-vm|clone-nosig|clone-sigchld [--threads N]
//              [--child-calls M] [--rounds R --calls K] [--ctl-fd FD]
// N threads (2) call probe_fn; another thread makes child after child, each calling probe_fn
// M times (10) and exiting 0 (spawn: posix_spawn of /bin/true). A child that does not exit 0
// is counted in "end ... child_failures=F".
//   clone-vm       clone(CLONE_VM|SIGCHLD): a process sharing our memory (and our int3 bytes)
//   clone-nosig    clone(0): a fork-like child with no exit signal (reported as a "clone")
//   clone-sigchld  clone(SIGCHLD): a plain fork through clone()
// Without --rounds it runs until "stop" on stdin. With --rounds R the forking thread makes R
// children and each hitting thread K calls, then the program ends by itself: then "calls" in
// the end line is exactly the number of calls made in this address space (vfork and clone-vm
// children included), which a tracer must count.
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "target_common.hpp"

extern char** environ;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<std::uint64_t> g_children{0}, g_child_failures{0};
std::uint64_t g_child_calls = 10;

int child_body(void*) {
  for (std::uint64_t i = 0; i < g_child_calls; ++i) fault::call_probe(i);
  return 0;
}

pid_t clone_child(int flags) {
  constexpr std::size_t kStack = 64 * 1024;
  static thread_local std::vector<char> stack(kStack);
  return ::clone(child_body, stack.data() + kStack, flags, nullptr);
}

pid_t make_child(const std::string& mode) {
  if (mode == "fork") {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(child_body(nullptr));
    return pid;
  }
  if (mode == "vfork") {
    pid_t pid = ::vfork();
    if (pid == 0) ::_exit(child_body(nullptr));  // runs in our memory until it exits
    return pid;
  }
  if (mode == "spawn") {
    pid_t pid = -1;
    char arg0[] = "true";
    char* args[] = {arg0, nullptr};
    return ::posix_spawn(&pid, "/bin/true", nullptr, nullptr, args, environ) == 0 ? pid : -1;
  }
  if (mode == "clone-vm") return clone_child(CLONE_VM | SIGCHLD);
  if (mode == "clone-nosig") return clone_child(0);
  return clone_child(SIGCHLD);  // clone-sigchld
}

void forker(const std::string& mode, std::uint64_t rounds) {
  for (std::uint64_t r = 0; (rounds == 0 && !g_stop) || r < rounds; ++r) {
    pid_t pid = make_child(mode);
    if (pid < 0) {
      g_child_failures.fetch_add(1);
      continue;
    }
    int status = 0;
    // __WALL: a child with no exit signal (clone-nosig) is only seen with it.
    while (::waitpid(pid, &status, __WALL) < 0 && errno == EINTR) {
    }
    g_children.fetch_add(1);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      g_child_failures.fetch_add(1);
      std::cerr << "fault_fork: child " << pid << " "
                << (WIFEXITED(status) ? "exited " + std::to_string(WEXITSTATUS(status))
                                      : "killed by signal " + std::to_string(WTERMSIG(status)))
                << "\n";
    }
  }
}

void hammer(std::uint64_t calls) {
  for (std::uint64_t i = 0; (calls == 0 && !g_stop.load(std::memory_order_relaxed)) || i < calls;
       ++i) {
    fault::call_probe(i);
  }
}

}  // namespace

int main(int argc, char** argv) {
  fault::init(argc, argv);
  std::string mode = fault::option(argc, argv, "--mode", "fork");
  unsigned threads = std::stoul(fault::option(argc, argv, "--threads", "2"));
  g_child_calls = std::stoull(fault::option(argc, argv, "--child-calls", "10"));
  std::uint64_t rounds = std::stoull(fault::option(argc, argv, "--rounds", "0"));
  std::uint64_t calls = std::stoull(fault::option(argc, argv, "--calls", "0"));
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) ts.emplace_back(hammer, calls);
  std::thread f(forker, mode, rounds);
  fault::say("ready " + std::to_string(getpid()));
  if (rounds == 0) {
    for (std::string line; std::getline(std::cin, line) && line != "stop";) {
    }
    g_stop = true;
  }
  f.join();
  for (auto& t : ts) t.join();
  fault::say_end("children=" + std::to_string(g_children.load()) +
                 " child_failures=" + std::to_string(g_child_failures.load()));
  return 0;
}
