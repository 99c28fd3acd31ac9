// A tiny tracee for the tracer's tests. Each of THREADS threads calls probecost_test_site()
// ITERATIONS times and the calls are counted by the program itself.
//   loop_target ITERATIONS THREADS [--pause] [--signals K]
// --pause: after the first round, print "phase1 calls=X", wait for a line on stdin, then run
//          the same round again. --signals K: raise SIGUSR1 K times, counted by a handler.
// Prints "calls=X signals=Y" at the end: the same output traced or not.
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "inferior/sanitizer_options.hpp"

namespace {
std::atomic<std::uint64_t> g_calls{0};
volatile sig_atomic_t g_signals = 0;
void on_usr1(int) {
  g_signals = g_signals + 1;
}
}  // namespace

extern "C" __attribute__((noipa)) void probecost_test_site(std::uint64_t i) {
  asm volatile("" ::"r"(i));
  g_calls.fetch_add(1, std::memory_order_relaxed);
}

static void round_of_calls(std::uint64_t iterations, unsigned threads) {
  auto body = [iterations] {
    for (std::uint64_t i = 0; i < iterations; ++i) probecost_test_site(i);
  };
  std::vector<std::thread> workers;
  for (unsigned t = 1; t < threads; ++t) workers.emplace_back(body);
  body();
  for (auto& w : workers) w.join();
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: loop_target ITERATIONS THREADS [--pause] [--signals K]\n");
    return 2;
  }
  std::uint64_t iterations = std::strtoull(argv[1], nullptr, 10);
  unsigned threads = static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10));
  bool pause = false;
  int signals = 0;
  for (int i = 3; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--pause")) pause = true;
    if (!std::strcmp(argv[i], "--signals") && i + 1 < argc) signals = std::atoi(argv[++i]);
  }
  signal(SIGUSR1, on_usr1);
  round_of_calls(iterations, threads);
  for (int i = 0; i < signals; ++i) raise(SIGUSR1);
  if (pause) {
    std::printf("phase1 calls=%llu\n", static_cast<unsigned long long>(g_calls.load()));
    std::fflush(stdout);
    std::string line;
    std::getline(std::cin, line);
    round_of_calls(iterations, threads);
  }
  std::printf("calls=%llu signals=%d\n", static_cast<unsigned long long>(g_calls.load()),
              static_cast<int>(g_signals));
  return 0;
}
