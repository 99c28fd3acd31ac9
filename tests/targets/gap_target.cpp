// A program that times its own loop: each iteration calls gap_fn (in the executable), malloc,
// free and write (to /dev/null), and the largest gap between two iterations is kept. On stdin:
//   gap   -> "gap_us=G iterations=N" (the largest gap since the last ask, then reset)
//   exit  -> "bye"
// A trace attaching while it loops holds it for the time its probes take to go in: the gap
// shows it from the inside. Prints "ready PID" first. `gap_target N`: N threads loop (1), the
// gap the largest of any.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

extern "C" __attribute__((noipa)) int gap_fn(int x) {
  asm volatile("" ::"r"(x));
  return x + 1;
}

namespace {

std::atomic<long> g_gap_ns{0};
std::atomic<long> g_iterations{0};
std::atomic<bool> g_stop{false};

void loop() {
  int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  auto last = std::chrono::steady_clock::now();
  for (int i = 0; !g_stop.load(std::memory_order_relaxed); ++i) {
    void* p = std::malloc(64 + (i & 63));
    asm volatile("" ::"r"(p) : "memory");  // used: the compiler may not drop malloc and free
    char c = static_cast<char>(gap_fn(i));
    [[maybe_unused]] ssize_t n = ::write(null, &c, 1);
    std::free(p);
    auto now = std::chrono::steady_clock::now();
    long gap = std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count();
    if (gap > g_gap_ns.load(std::memory_order_relaxed)) g_gap_ns = gap;
    g_iterations.fetch_add(1, std::memory_order_relaxed);
    last = now;
  }
  ::close(null);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  std::vector<std::thread> loops;
  for (int i = 0; i < threads; ++i) loops.emplace_back(loop);
  std::printf("ready %d\n", ::getpid());
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    if (line == "gap") {
      std::printf("gap_us=%ld iterations=%ld\n", g_gap_ns.exchange(0) / 1000,
                  g_iterations.exchange(0));
      std::fflush(stdout);
    } else if (line == "exit") {
      break;
    }
  }
  g_stop = true;
  for (auto& t : loops) t.join();
  std::printf("bye\n");
  return 0;
}
