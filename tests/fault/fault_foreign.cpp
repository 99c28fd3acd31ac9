// A process that holds breakpoints that are not probecost's, for `probecost restore`:
//   fault_foreign [--threads N] [--ctl-fd FD]
// - its own: an int3 it writes over the first byte of own_hook(), which returns 2; its SIGTRAP
//   handler makes a call that traps there return 4242 instead (a self-installed hook);
// - a kernel uprobe's, which the driver puts on uprobe_fn() (called by the main thread).
// After "ready PID" it says "sites own_hook=0x... uprobe_fn=0x...". "go K": each of N threads
// calls probe_fn K times, the main thread calls uprobe_fn K times and own_hook once ->
// "done calls=TOTAL hook=VALUE uprobe_calls=TOTAL". "stop" ends it with its end line.
#include <fcntl.h>
#include <signal.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "target_common.hpp"

extern "C" __attribute__((noipa)) int own_hook() {
  return 2;
}

extern "C" __attribute__((noipa)) void uprobe_fn() {
  static std::atomic<int> calls{0};
  calls.fetch_add(1, std::memory_order_relaxed);
}

namespace {

struct sigaction g_common;  // target_common's handler, for every other trap
std::uint64_t g_uprobe_calls = 0;

// A trap on own_hook's int3 returns 4242 to its caller; anything else goes to the common
// handler.
void on_sigtrap(int sig, siginfo_t* info, void* context) {
  auto* uc = static_cast<ucontext_t*>(context);
  greg_t* r = uc->uc_mcontext.gregs;
  if (static_cast<std::uintptr_t>(r[REG_RIP]) - 1 == reinterpret_cast<std::uintptr_t>(&own_hook)) {
    r[REG_RAX] = 4242;
    r[REG_RIP] = *reinterpret_cast<greg_t*>(r[REG_RSP]);  // ret
    r[REG_RSP] += 8;
    return;
  }
  g_common.sa_sigaction(sig, info, context);
}

void install_own_hook() {
  struct sigaction sa = {};
  sa.sa_sigaction = on_sigtrap;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, &g_common);
  fault::expect_sigtrap_handler(on_sigtrap);
  int mem = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  const unsigned char int3 = 0xCC;
  if (mem < 0 || ::pwrite(mem, &int3, 1,
                          static_cast<off_t>(reinterpret_cast<std::uintptr_t>(&own_hook))) != 1) {
    std::perror("fault_foreign: writing own_hook's int3");
    std::exit(2);
  }
  ::close(mem);
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  fault::init(argc, argv);
  install_own_hook();
  unsigned threads = std::stoul(fault::option(argc, argv, "--threads", "2"));
  fault::say("ready " + std::to_string(getpid()));
  fault::say("sites own_hook=" + hex(reinterpret_cast<const void*>(&own_hook)) +
             " uprobe_fn=" + hex(reinterpret_cast<const void*>(&uprobe_fn)));
  int hook = 0;
  for (std::string line; std::getline(std::cin, line);) {
    if (line.rfind("go ", 0) == 0) {
      std::uint64_t k = std::stoull(line.substr(3));
      std::vector<std::thread> ts;
      for (unsigned t = 0; t < threads; ++t) {
        ts.emplace_back([k] {
          for (std::uint64_t i = 0; i < k; ++i) fault::call_probe(i);
        });
      }
      for (auto& t : ts) t.join();
      for (std::uint64_t i = 0; i < k; ++i) uprobe_fn();
      g_uprobe_calls += k;
      hook = own_hook();
      fault::say("done calls=" + std::to_string(fault::g_calls.load()) + " hook=" +
                 std::to_string(hook) + " uprobe_calls=" + std::to_string(g_uprobe_calls));
    } else if (line == "stop") {
      break;
    }
  }
  // The text holds our own int3 and the uprobe's, rightly: the driver compares it, not text=.
  fault::say_end("hook=" + std::to_string(hook));
  return 0;
}
