// A workload with a known number of events, for probecost overhead's tests. Each of THREADS
// threads calls probecost_event() EVENTS times, with SPIN iterations of busy work between calls.
//   events_target EVENTS [--threads T] [--spin N] [--exit CODE] [--read-stdin] [--forever]
//                 [--exec-self] [--tiny] [--push] [--sigint-parent-at N FILE]
// --read-stdin: reads its standard input to the end first and prints how many bytes it got.
// --forever: calls the event without end, in one thread (for -p PID); it never exits by itself.
// --exec-self: first execs itself with the same arguments but this one (a wrapper that execs
// the program, as a shell script does), so the events all come from the second image.
// --tiny: also calls probecost_tiny(), a function too short for a jump probe, before each event.
// --push: also calls probecost_push_event(), whose first instruction is one byte long.
// --sigint-parent-at N FILE: counts its runs in FILE; the Nth run sends SIGINT to its parent
// (probecost) before it exits, as a user's Ctrl-C would at that moment.
// Prints "events=X" on stdout and "stderr line" on stderr, then exits with CODE (default 0).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "inferior/sanitizer_options.hpp"

namespace {
std::atomic<std::uint64_t> g_events{0};
}  // namespace

extern "C" __attribute__((noipa)) void probecost_event(std::uint64_t i) {
  asm volatile("" ::"r"(i));
  g_events.fetch_add(1, std::memory_order_relaxed);
}

// A bare `ret`, at every optimisation level (a -O0 build would give an empty function a frame):
// no jump fits (a jump needs 5 bytes of instructions that can run elsewhere).
extern "C" __attribute__((naked, noipa)) void probecost_tiny(std::uint64_t) {
  asm("ret\n");
}

extern "C" {
std::uint64_t probecost_push_events = 0;  // counted by probecost_push_event
}

// A site whose first instruction is 1 byte (`push %rbx`): an int3 probe's step-over runs it from
// a copy that jumps back to site+1, which a jump probe's jmp covers.
extern "C" __attribute__((naked, noipa)) void probecost_push_event(std::uint64_t) {
  asm("push %rbx\n"
      "mov %rdi, %rbx\n"
      "lock addq $1, probecost_push_events(%rip)\n"
      "pop %rbx\n"
      "ret\n");
}

namespace {
bool g_tiny = false, g_push = false;
}  // namespace

static void spin(std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) asm volatile("");
}

static void run(std::uint64_t events, std::uint64_t work) {
  for (std::uint64_t i = 0; i < events; ++i) {
    spin(work);
    if (g_tiny) probecost_tiny(i);
    if (g_push) probecost_push_event(i);
    probecost_event(i);
  }
}

// The Nth run of a series (counted in `file`) interrupts its parent.
static void count_run(const char* file, int n) {
  int runs = 0;
  if (FILE* f = std::fopen(file, "r")) {
    if (std::fscanf(f, "%d", &runs) != 1) runs = 0;
    std::fclose(f);
  }
  if (FILE* f = std::fopen(file, "w")) {
    std::fprintf(f, "%d\n", ++runs);
    std::fclose(f);
  }
  if (runs == n) ::kill(::getppid(), SIGINT);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: events_target EVENTS [--threads T] [--spin N] [--exit CODE] "
                 "[--read-stdin] [--forever] [--exec-self]\n");
    return 2;
  }
  std::uint64_t events = std::strtoull(argv[1], nullptr, 10), work = 100;
  unsigned threads = 1;
  int code = 0;
  bool read_stdin = false, forever = false;
  int interrupt_at = 0;
  const char* runs_file = nullptr;
  std::vector<char*> again = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--exec-self") != 0) again.push_back(argv[i]);
  }
  if (again.size() < static_cast<std::size_t>(argc)) {
    again.push_back(nullptr);
    ::execv("/proc/self/exe", again.data());
    std::perror("events_target: exec");
    return 127;
  }
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--spin") && i + 1 < argc) work = std::strtoull(argv[++i], 0, 10);
    if (!std::strcmp(argv[i], "--exit") && i + 1 < argc) code = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--read-stdin")) read_stdin = true;
    if (!std::strcmp(argv[i], "--forever")) forever = true;
    if (!std::strcmp(argv[i], "--tiny")) g_tiny = true;
    if (!std::strcmp(argv[i], "--push")) g_push = true;
    if (!std::strcmp(argv[i], "--sigint-parent-at") && i + 2 < argc) {
      interrupt_at = std::atoi(argv[++i]);
      runs_file = argv[++i];
    }
  }
  if (read_stdin) {
    std::size_t bytes = 0;
    char buf[4096];
    for (ssize_t n; (n = ::read(0, buf, sizeof buf)) > 0;) bytes += static_cast<std::size_t>(n);
    std::printf("stdin=%zu bytes\n", bytes);
  }
  if (forever) {
    std::printf("ready\n");
    std::fflush(stdout);
    for (std::uint64_t i = 0;; ++i) {
      spin(work);
      if (g_tiny) probecost_tiny(i);
      if (g_push) probecost_push_event(i);
      probecost_event(i);
    }
  }
  std::vector<std::thread> workers;
  for (unsigned t = 1; t < threads; ++t) workers.emplace_back(run, events, work);
  run(events, work);
  for (auto& w : workers) w.join();
  std::printf("events=%llu\n", static_cast<unsigned long long>(g_events.load()));
  std::fprintf(stderr, "stderr line\n");
  if (runs_file) count_run(runs_file, interrupt_at);
  return code;
}
