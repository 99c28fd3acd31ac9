// A tracee whose signals carry information (issue 25): a thread calls probecost_test_site()
// without pause while signals reach it, and an SA_SIGINFO handler writes down what each one
// said. Traced, the thread is held at its site most of the time, so the signals arrive while
// the tracer holds it; the output must be the same as untraced, field by field.
//   siginfo_target ROUNDS
// Each round: sigqueue() values from a child, paced (one in flight) and in a burst; kill()s
// (SI_USER) from that child in a burst; standard signals, one of each number, sigqueue()d and
// kill()ed; the child's exit (SIGCHLD); children exiting one by one (SIGCHLD, CLD_EXITED, each
// status); tgkill()s from the program's own main thread in a burst (SI_TKILL). A burst of one
// signal number is real-time: queued, delivered in order; the standard ones are printed in
// the order of their numbers (the kernel's own when several are pending). The handler
// acknowledges each signal on a pipe, which paces the sender: no sleep anywhere.
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "inferior/sanitizer_options.hpp"

namespace {

constexpr int kBurst = 6;
constexpr int kChildren = 3;
constexpr int kMaxRecords = 4096;

struct Record {
  int signo, code, value, pid, status;
};
Record g_records[kMaxRecords];
std::atomic<int> g_count{0};
std::atomic<bool> g_stop{false};
int g_ack[2];

void on_signal(int sig, siginfo_t* info, void*) {
  int n = g_count.load(std::memory_order_relaxed);
  if (n < kMaxRecords) {
    int value = info->si_code == SI_QUEUE ? info->si_value.sival_int : -1;
    int status = sig == SIGCHLD ? info->si_status : -1;
    g_records[n] = {sig, info->si_code, value, info->si_pid, status};
    g_count.store(n + 1, std::memory_order_relaxed);
  }
  char c = 'x';
  if (write(g_ack[1], &c, 1) != 1) _exit(3);
}

void wait_acks(int n) {
  char c;
  for (int i = 0; i < n; ++i) {
    if (read(g_ack[0], &c, 1) != 1) _exit(4);
  }
}

std::array<int, 7> handled() {
  return {SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM, SIGRTMIN, SIGRTMIN + 1, SIGRTMIN + 2};
}

sigset_t our_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : handled()) sigaddset(&set, sig);
  return set;
}

}  // namespace

extern "C" __attribute__((noipa)) void probecost_test_site(std::uint64_t i) {
  asm volatile("" ::"r"(i));
}

namespace {

// The sender: sigqueue() values paced, then in a burst, then kill()s in a burst.
[[noreturn]] void sender(pid_t to, int round) {
  for (int i = 0; i < kBurst; ++i) {
    if (sigqueue(to, SIGRTMIN, sigval{.sival_int = round * 1000 + i}) != 0) _exit(5);
    wait_acks(1);
  }
  for (int i = 0; i < kBurst; ++i) {
    if (sigqueue(to, SIGRTMIN, sigval{.sival_int = round * 1000 + 100 + i}) != 0) _exit(5);
  }
  wait_acks(kBurst);
  for (int i = 0; i < kBurst; ++i) {
    if (kill(to, SIGRTMIN + 2) != 0) _exit(5);
  }
  wait_acks(kBurst);
  if (sigqueue(to, SIGUSR1, sigval{.sival_int = round * 1000 + 200}) != 0) _exit(5);
  if (kill(to, SIGUSR2) != 0) _exit(5);
  if (sigqueue(to, SIGALRM, sigval{.sival_int = round * 1000 + 201}) != 0) _exit(5);
  wait_acks(3);
  _exit(7);
}

// One round; kids gets its children's pids (the sender first), to name the senders by role.
void round_of_signals(int round, pid_t worker, pid_t* kids) {
  pid_t self = getpid();
  kids[0] = fork();
  if (kids[0] == 0) sender(self, round);
  if (kids[0] < 0) _exit(6);
  // Reaped first: until it exits, the acknowledgements are the sender's to read. Then its
  // SIGCHLD's (sent before it became reapable).
  waitpid(kids[0], nullptr, 0);
  wait_acks(1);
  for (int k = 1; k <= kChildren; ++k) {
    kids[k] = fork();
    if (kids[k] == 0) _exit(10 + k);
    if (kids[k] < 0) _exit(6);
    waitpid(kids[k], nullptr, 0);
    wait_acks(1);
  }
  for (int i = 0; i < kBurst; ++i) syscall(SYS_tgkill, self, worker, SIGRTMIN + 1);
  wait_acks(kBurst);
}

bool standard(const Record& r) {
  return r.signo == SIGUSR1 || r.signo == SIGUSR2 || r.signo == SIGALRM;
}

// The standard signals of a round in the order of their numbers.
void sort_standard(int n) {
  for (int i = 0; i < n; ++i) {
    int end = i;
    while (end < n && standard(g_records[end])) ++end;
    std::sort(g_records + i, g_records + end,
              [](const Record& a, const Record& b) { return a.signo < b.signo; });
    i = end;
  }
}

const char* who(int pid, const pid_t* kids, int rounds) {
  static char buf[32];
  if (pid == getpid()) return "self";
  for (int i = 0; i < rounds * (kChildren + 1); ++i) {
    if (kids[i] == pid) {
      std::snprintf(buf, sizeof buf, "child%d", i);
      return buf;
    }
  }
  std::snprintf(buf, sizeof buf, "other(%d)", pid);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 1;
  if (rounds < 1 || rounds > 50 || pipe(g_ack) != 0) return 2;
  struct sigaction sa = {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigfillset(&sa.sa_mask);
  sigset_t ours = our_signals();
  for (int sig : handled()) sigaction(sig, &sa, nullptr);
  // Only the worker takes the signals: the main thread (and the children it forks) block them.
  pthread_sigmask(SIG_BLOCK, &ours, nullptr);
  std::atomic<pid_t> worker_tid{0};
  std::thread worker([&] {
    worker_tid = static_cast<pid_t>(syscall(SYS_gettid));
    pthread_sigmask(SIG_UNBLOCK, &ours, nullptr);
    for (std::uint64_t i = 0; !g_stop.load(std::memory_order_relaxed); ++i) probecost_test_site(i);
  });
  while (worker_tid.load() == 0) std::this_thread::yield();
  pid_t kids[50 * (kChildren + 1)];
  for (int r = 0; r < rounds; ++r) round_of_signals(r, worker_tid, kids + r * (kChildren + 1));
  g_stop = true;
  worker.join();
  int n = g_count.load();
  sort_standard(n);
  for (int i = 0; i < n; ++i) {
    const Record& rec = g_records[i];
    if (rec.signo < SIGRTMIN) {
      std::printf("%s", sigabbrev_np(rec.signo));
    } else {
      std::printf("SIGRTMIN+%d", rec.signo - SIGRTMIN);
    }
    std::printf(" code=%d value=%d from=%s status=%d\n", rec.code, rec.value,
                who(rec.pid, kids, rounds), rec.status);
  }
  std::printf("signals=%d\n", n);
  return 0;
}
