// A long-running tracee for `probecost trace` tests, driven line by line on stdin; every
// command answers one line on stdout, so tests synchronise on the program's own words.
//   go N       THREADS new threads each call probecost_test_site N times -> "calls=TOTAL"
//   lib N      call probecost_lib_site (libserve_lib.so) N times          -> "lib=TOTAL"
//   signals K  raise SIGUSR1 K times, counted by a handler                 -> "signals=TOTAL"
//   gosig N    THREADS threads call the site N times each, and on until 1000 signals have
//              been handled, while the main thread sends SIGUSR2 to them as fast as it can;
//              the handler calls the site too  -> "calls=TOTAL loops=L handled=H" (TOTAL = L+H)
//   fork N     a forked child calls probecost_test_site N times, exits 0  -> "child=STATUS"
//   spawn      posix_spawn /bin/true (a vfork child sharing our memory)    -> "spawned=STATUS"
//   exec       exec /bin/true                                              -> "exec"
//   exit       exit 0                                                      -> "bye"
// Usage: serve_target THREADS. Prints "ready PID" first.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "inferior/sanitizer_options.hpp"

extern "C" void probecost_lib_site(std::uint64_t);
extern "C" std::uint64_t probecost_lib_calls();

namespace {
std::atomic<std::uint64_t> g_calls{0};
volatile sig_atomic_t g_signals = 0;
std::atomic<std::uint64_t> g_handled{0};
extern "C" void probecost_test_site(std::uint64_t i);
void on_usr2(int) {
  // Re-enters the probed function from a signal that may have landed anywhere, a trampoline
  // included.
  probecost_test_site(0);
  g_handled.fetch_add(1, std::memory_order_relaxed);
}
void on_usr1(int) {
  g_signals = g_signals + 1;
}
void reply(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}
}  // namespace

// A function whose first instruction is 10 bytes long whatever the build flags: +1..+9 are
// inside it (the "address inside an instruction" test).
asm(R"(
  .text
  .globl probecost_long_insn
  .type probecost_long_insn, @function
probecost_long_insn:
  movabs $0x1122334455667788, %rax
  ret
  .size probecost_long_insn, .-probecost_long_insn

  # Sites a jump cannot patch: shorter than a jmp rel32, and a call in the first 5 bytes.
  .globl probecost_tiny
  .type probecost_tiny, @function
probecost_tiny:
  xor %eax, %eax
  ret
  .size probecost_tiny, .-probecost_tiny

  .globl probecost_calls_first
  .type probecost_calls_first, @function
probecost_calls_first:
  call probecost_tiny
  ret
  .size probecost_calls_first, .-probecost_calls_first
)");

extern "C" __attribute__((noipa)) void probecost_test_site(std::uint64_t i) {
  asm volatile("" ::"r"(i));
  g_calls.fetch_add(1, std::memory_order_relaxed);
}

int main(int argc, char** argv) {
  unsigned threads = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 1;
  signal(SIGUSR1, on_usr1);
  reply("ready " + std::to_string(getpid()));
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string cmd;
    std::uint64_t n = 0;
    in >> cmd >> n;
    if (cmd == "go") {
      std::vector<std::thread> ts;
      for (unsigned t = 0; t < threads; ++t) {
        ts.emplace_back([n] {
          for (std::uint64_t i = 0; i < n; ++i) probecost_test_site(i);
        });
      }
      for (auto& t : ts) t.join();
      reply("calls=" + std::to_string(g_calls.load()));
    } else if (cmd == "lib") {
      for (std::uint64_t i = 0; i < n; ++i) probecost_lib_site(i);
      reply("lib=" + std::to_string(probecost_lib_calls()));
    } else if (cmd == "gosig") {
      signal(SIGUSR2, on_usr2);
      std::uint64_t before = g_calls.load();
      std::atomic<unsigned> running{threads};
      std::atomic<std::uint64_t> loops{0};
      std::vector<std::thread> ts;
      for (unsigned t = 0; t < threads; ++t) {
        ts.emplace_back([n, &running, &loops] {
          std::uint64_t i = 0;
          for (; i < n || g_handled.load(std::memory_order_relaxed) < 1000; ++i) {
            probecost_test_site(i);
          }
          loops.fetch_add(i);
          running.fetch_sub(1);
        });
      }
      std::vector<pthread_t> handles;
      for (auto& t : ts) handles.push_back(t.native_handle());
      while (running.load() > 0) {
        for (std::size_t t = 0; t < handles.size(); ++t) pthread_kill(handles[t], SIGUSR2);
      }
      for (auto& t : ts) t.join();
      reply("calls=" + std::to_string(g_calls.load() - before) + " loops=" +
            std::to_string(loops.load()) + " handled=" + std::to_string(g_handled.load()));
    } else if (cmd == "signals") {
      for (std::uint64_t i = 0; i < n; ++i) raise(SIGUSR1);
      reply("signals=" + std::to_string(g_signals));
    } else if (cmd == "fork") {
      pid_t child = fork();
      if (child == 0) {
        for (std::uint64_t i = 0; i < n; ++i) probecost_test_site(i);
        _exit(0);
      }
      int status = 0;
      waitpid(child, &status, 0);
      reply(WIFEXITED(status) ? "child=exited " + std::to_string(WEXITSTATUS(status))
                              : "child=killed " + std::to_string(WTERMSIG(status)));
    } else if (cmd == "spawn") {
      pid_t child;
      char arg0[] = "true";
      char* args[] = {arg0, nullptr};
      int status = 0;
      if (posix_spawn(&child, "/bin/true", nullptr, nullptr, args, environ) != 0) {
        reply("spawned=failed");
      } else {
        waitpid(child, &status, 0);
        reply(WIFEXITED(status) ? "spawned=exited " + std::to_string(WEXITSTATUS(status))
                                : "spawned=killed " + std::to_string(WTERMSIG(status)));
      }
    } else if (cmd == "exec") {
      reply("exec");
      execl("/bin/true", "true", nullptr);
      reply("exec failed");
    } else if (cmd == "exit") {
      reply("bye");
      return 0;
    } else {
      reply("unknown command");
    }
  }
  return 0;
}
