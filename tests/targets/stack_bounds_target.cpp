// A thread whose stack is the lower half of one 2 MiB mapping (pthread_attr_setstack), the upper
// half unmapped by the program while the thread calls bounds_leaf, the probed function. A jump
// probe's stack snapshot must stop at the top of the thread's stack, not at the end of the
// mapping as /proc/PID/maps showed it when the thread was seen (the copy ran into the unmapped
// half: SIGSEGV in the trampoline, 10 of 10 runs, before the fix).
//
// Prints "ready" once the thread runs (a test attaches then), waits for the probe (a jmp at
// bounds_leaf's first byte: at once when launched by probecost, which probes before main),
// unmaps the upper half, lets the thread make kAfter more calls, and prints how many it made.
//
// `stack_bounds_target signal N`: N calls of bounds_leaf from a SIGUSR1 handler on the main
// stack (raise): the stack runs through the signal frame (__restore_rt, which has no symbol),
// pthread_kill, raise and main; prints "signal=N".
//
// `stack_bounds_target interrupted N`: N calls of bounds_leaf on the main thread while another
// thread signals it (SIGUSR2, an empty handler) without a pause: signals that land inside a
// snapshot's restartable sequence (its stack copy is the long part) abort it, and the record is
// made again from the start; prints "interrupted=N".
//
// `stack_bounds_target serve`: prints "ready", then a thread calls bounds_leaf without pause,
// checking each result, until standard input ends; prints "calls=N bad=M".
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

extern "C" {
volatile long g_bounds_sink;
__attribute__((noinline)) long bounds_leaf(long x) {
  g_bounds_sink = x;  // long enough for a jump: a store, then the arithmetic
  asm volatile("" ::: "memory");
  return g_bounds_sink * 3 + 1;
}
}

namespace {

constexpr long kAfter = 2000;
std::atomic<long> g_calls{0};
std::atomic<bool> g_stop{false};

void* thread_main(void*) {
  while (!g_stop.load()) {
    bounds_leaf(g_calls.load());
    g_calls.fetch_add(1);
  }
  return nullptr;
}

std::atomic<long> g_signals{0};

void on_signal(int) {
  bounds_leaf(g_signals.load());
  g_signals.fetch_add(1);
}

int signal_calls(long n) {
  signal(SIGUSR1, on_signal);
  for (long i = 0; i < n; ++i) raise(SIGUSR1);
  std::printf("signal=%ld\n", g_signals.load());
  return 0;
}

std::atomic<bool> g_done{false};

void* signaller(void* main_thread) {
  pthread_t to = *static_cast<pthread_t*>(main_thread);
  while (!g_done.load()) pthread_kill(to, SIGUSR2);
  return nullptr;
}

// bounds_leaf 64 KiB below main's frame: a copy of --stack-size bytes is a long one.
__attribute__((noinline)) long deep_leaf(long x) {
  volatile char pad[65536];
  pad[0] = static_cast<char>(x);
  long r = bounds_leaf(x);
  asm volatile("" ::"r"(pad) : "memory");
  return r;
}

int interrupted_calls(long n) {
  signal(SIGUSR2, [](int) {});
  pthread_t self = pthread_self(), t;
  if (pthread_create(&t, nullptr, signaller, &self) != 0) return 1;
  long made = 0;
  for (long i = 0; i < n; ++i, ++made) deep_leaf(i);
  g_done.store(true);
  pthread_join(t, nullptr);
  std::printf("interrupted=%ld\n", made);
  return 0;
}

int serve() {
  std::atomic<long> bad{0};
  std::thread worker([&] {
    for (long i = 0; !g_stop.load(); ++i)
      if (bounds_leaf(i) != i * 3 + 1)
        bad.fetch_add(1);
      else
        g_calls.fetch_add(1);
  });
  std::printf("ready\n");
  std::fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  g_stop.store(true);
  worker.join();
  std::printf("calls=%ld bad=%ld\n", g_calls.load() > 0 ? 1L : 0L, bad.load());
  return 0;
}

bool probed() {
  auto* first = reinterpret_cast<volatile const std::uint8_t*>(&bounds_leaf);
  return *first == 0xe9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "signal") == 0) return signal_calls(std::atol(argv[2]));
  if (argc == 2 && std::strcmp(argv[1], "serve") == 0) return serve();
  if (argc == 3 && std::strcmp(argv[1], "interrupted") == 0)
    return interrupted_calls(std::atol(argv[2]));
  alarm(60);  // a failsafe should the probe never come: the test fails, it does not hang
  constexpr std::size_t kHalf = std::size_t{1} << 20;
  void* region =
      mmap(nullptr, 2 * kHalf, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region == MAP_FAILED) return 1;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, region, kHalf);
  pthread_t t;
  if (pthread_create(&t, &attr, thread_main, nullptr) != 0) return 1;
  while (g_calls.load() == 0) {
  }
  std::printf("ready\n");
  std::fflush(stdout);
  while (!probed()) sched_yield();
  munmap(static_cast<char*>(region) + kHalf, kHalf);
  long from = g_calls.load();
  while (g_calls.load() < from + kAfter) {
  }
  g_stop.store(true);
  pthread_join(t, nullptr);
  std::printf("calls=%ld after=%ld\n", g_calls.load(), kAfter);
  return 0;
}
