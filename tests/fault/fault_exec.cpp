// A process that execs while its other threads hit the probe.
//   fault_exec [--threads N] [--from main|thread] [--ctl-fd FD]
// N threads (3) call probe_fn without pause. "exec" on stdin: the main thread, or one of the
// hitting threads (--from thread; the kernel then makes it the leader), execs this program
// again with --after-exec, which says "exec-ok" and exits 0.
#include <unistd.h>

#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "target_common.hpp"

namespace {

std::atomic<bool> g_exec_requested{false};
std::string g_ctl_fd = "1";

[[noreturn]] void exec_self() {
  fault::say_end();
  char self[] = "/proc/self/exe";
  std::string fd = g_ctl_fd;
  char after[] = "--after-exec";
  char ctl[] = "--ctl-fd";
  char* args[] = {self, after, ctl, fd.data(), nullptr};
  ::execv(self, args);
  fault::say("exec-failed");
  ::_exit(1);
}

void hammer(bool execs) {
  for (std::uint64_t i = 0;; ++i) {
    fault::call_probe(i);
    if (execs && g_exec_requested.load(std::memory_order_relaxed)) exec_self();
  }
}

}  // namespace

int main(int argc, char** argv) {
  fault::init(argc, argv);
  g_ctl_fd = fault::option(argc, argv, "--ctl-fd", "1");
  if (fault::flag(argc, argv, "--after-exec")) {
    fault::say("exec-ok");
    return 0;
  }
  unsigned threads = std::stoul(fault::option(argc, argv, "--threads", "3"));
  bool from_thread = fault::option(argc, argv, "--from", "main") == "thread";
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) ts.emplace_back(hammer, from_thread && t == 0);
  fault::say("ready " + std::to_string(getpid()));
  for (std::string line; std::getline(std::cin, line);) {
    if (line != "exec") continue;
    if (!from_thread) exec_self();
    g_exec_requested = true;
    for (;;) ::pause();
  }
  return 1;
}
