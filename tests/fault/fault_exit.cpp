// A process that ends with exit() while its other threads hit the probe.
//   fault_exit [--threads N] [--from main|thread] [--ctl-fd FD]
// N threads (3) call probe_fn without pause. "exit" on stdin: the main thread, or one of the
// hitting threads (--from thread), calls exit(0) while the others go on hitting. It says
// "end ..." first, so the driver knows the program's own view before it goes.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "target_common.hpp"

namespace {

std::atomic<bool> g_exit_requested{false};

void hammer(bool exits) {
  for (std::uint64_t i = 0;; ++i) {
    fault::call_probe(i);
    if (exits && g_exit_requested.load(std::memory_order_relaxed)) {
      fault::say_end("from=thread");
      std::exit(0);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  fault::init(argc, argv);
  unsigned threads = std::stoul(fault::option(argc, argv, "--threads", "3"));
  bool from_thread = fault::option(argc, argv, "--from", "main") == "thread";
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) ts.emplace_back(hammer, from_thread && t == 0);
  fault::say("ready " + std::to_string(getpid()));
  for (std::string line; std::getline(std::cin, line);) {
    if (line != "exit") continue;
    if (from_thread) {
      g_exit_requested = true;
      for (;;) ::pause();
    }
    break;
  }
  fault::say_end("from=main");
  std::exit(0);  // the hitting threads are still running
}
