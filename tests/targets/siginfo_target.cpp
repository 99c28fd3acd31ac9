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
// A burst starts when the worker asks for it, with the signals blocked until it has called
// probecost_burst_point(): a tracer that probes that function, waits there for the burst's
// last signal (SIGRTMIN+3, the highest number: delivered last) and unblocks them has the whole
// burst reach the worker while it holds it.
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
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
#include <new>
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
int g_go[2];  // the worker's go to the sender, for a burst
// Shared with the sender: a burst asked for, the worker's tid (for its tgkill()s).
struct Shared {
  std::atomic<int> want_burst{0};
  std::atomic<pid_t> worker{0};
};
Shared* g_shared;

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

std::array<int, 8> handled() {
  return {SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM, SIGRTMIN, SIGRTMIN + 1, SIGRTMIN + 2, SIGRTMIN + 3};
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

extern "C" __attribute__((noipa)) void probecost_burst_point() {
  asm volatile("");
}

namespace {

void send(pid_t to, int sig, int value) {
  int r = value < 0 ? kill(to, sig) : sigqueue(to, sig, sigval{.sival_int = value});
  if (r != 0) _exit(5);
}

// `n` signals sent at once once the worker asked, then the burst's last one, SIGRTMIN+3.
template <typename Send>
void burst(pid_t to, int n, int round, Send send_all) {
  g_shared->want_burst.store(1);
  char c;
  if (read(g_go[0], &c, 1) != 1) _exit(4);
  send_all();
  send(to, SIGRTMIN + 3, round * 1000 + 999);
  wait_acks(n + 1);
}

// The sender: sigqueue() values paced, then bursts of sigqueue()s, kill()s, tgkill()s (SI_TKILL)
// and standard signals.
[[noreturn]] void sender(pid_t to, int round) {
  int v = round * 1000;
  for (int i = 0; i < kBurst; ++i) {
    send(to, SIGRTMIN, v + i);
    wait_acks(1);
  }
  burst(to, kBurst, round, [&] {
    for (int i = 0; i < kBurst; ++i) send(to, SIGRTMIN, v + 100 + i);
  });
  burst(to, kBurst, round, [&] {
    for (int i = 0; i < kBurst; ++i) send(to, SIGRTMIN + 2, -1);
  });
  burst(to, kBurst, round, [&] {
    for (int i = 0; i < kBurst; ++i) syscall(SYS_tgkill, to, g_shared->worker.load(), SIGRTMIN + 1);
  });
  burst(to, 3, round, [&] {
    send(to, SIGUSR1, v + 200);
    send(to, SIGUSR2, -1);
    send(to, SIGALRM, v + 201);
  });
  _exit(7);
}

void work() {
  for (std::uint64_t i = 0; !g_stop.load(std::memory_order_relaxed); ++i) {
    probecost_test_site(i);
    if (g_shared->want_burst.load() && g_shared->want_burst.exchange(0)) {
      // Blocked until after the burst point: none of the burst comes before it.
      sigset_t ours = our_signals();
      pthread_sigmask(SIG_BLOCK, &ours, nullptr);
      char c = 'g';
      if (write(g_go[1], &c, 1) != 1) _exit(3);
      probecost_burst_point();
      pthread_sigmask(SIG_UNBLOCK, &ours, nullptr);
    }
  }
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
  if (rounds < 1 || rounds > 50 || pipe(g_ack) != 0 || pipe(g_go) != 0) return 2;
  void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 2;
  g_shared = new (shared) Shared;
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
    g_shared->worker = static_cast<pid_t>(syscall(SYS_gettid));
    worker_tid = g_shared->worker.load();
    pthread_sigmask(SIG_UNBLOCK, &ours, nullptr);
    work();
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
