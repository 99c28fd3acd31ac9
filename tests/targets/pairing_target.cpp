// The tracee of record's pairing tests (issue 24 item 7): calls whose pairing the recording got
// wrong, each counted by the program itself so that a recording can be checked against it.
//   spawn N    work(i) N times, posix_spawn("/bin/true") and wait, work(i) N times again
//   vfork N    the same around vfork() + _exit(0)
//   system N   the same around system("true")
//   deep N     rec(N): N + 1 nested calls of one function
//   coro N     two ucontext coroutines, each in yielder(i) when it swaps to the other: N calls
//   tail N     strtold("1.5") N times (glibc's strtold ends in a jmp to __strtold_internal)
//   names N    main renames itself "main-new", starts a thread that renames itself "worker"
//              and calls work N times, joins it, calls work N times, renames itself
//              "main-late" and calls work N times again
// Each prints what it computed (the same traced and untraced). With "stdin" as argv[3] it
// first says "ready" and reads a line from stdin (a test's -p attaches meanwhile), and after
// its work reads another.
#include <pthread.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define NOINLINE __attribute__((noinline))
#define KEEP asm volatile("" ::: "memory")

extern char** environ;

extern "C" {

NOINLINE long work(long x) {
  KEEP;
  return x * 3 + 1;
}

// Not a tail call: its add comes after the call returns.
NOINLINE __attribute__((optimize("no-optimize-sibling-calls"))) long rec(long n) {
  if (n == 0) return 0;
  long r = rec(n - 1);
  KEEP;
  return r + 1;
}

}  // extern "C"

namespace {

ucontext_t main_ctx, coro_ctx[2];
long coro_calls = 0, coro_target = 0;
int running = 0;
bool done[2] = {false, false};

}  // namespace

// Yields to main mid-call (on its coroutine's own stack), and returns when resumed.
extern "C" NOINLINE long yielder(long i) {
  KEEP;
  swapcontext(&coro_ctx[running], &main_ctx);
  KEEP;
  return i + 1;
}

namespace {

void coroutine() {
  long sum = 0;
  while (coro_calls < coro_target) sum += yielder(coro_calls++);
  std::printf("coroutine %d: %ld\n", running, sum);
  done[running] = true;
  swapcontext(&coro_ctx[running], &main_ctx);  // never resumed
}

long coroutines(long n) {
  static char stacks[2][256 << 10];
  coro_target = n;
  for (int c = 0; c < 2; ++c) {
    getcontext(&coro_ctx[c]);
    coro_ctx[c].uc_stack.ss_sp = stacks[c];
    coro_ctx[c].uc_stack.ss_size = sizeof stacks[c];
    makecontext(&coro_ctx[c], coroutine, 0);
  }
  // Alternate until both have made their calls.
  for (long turn = 0; !(done[0] && done[1]); ++turn) {
    running = static_cast<int>(turn % 2);
    if (!done[running]) swapcontext(&main_ctx, &coro_ctx[running]);
  }
  return coro_calls;
}

long around(long n, int (*child)()) {
  long sum = 0;
  for (long i = 0; i < n; ++i) sum += work(i);
  int status = child();
  for (long i = 0; i < n; ++i) sum += work(i);
  return status == 0 ? sum : -1;
}

int spawn_true() {
  pid_t pid;
  char arg0[] = "true";
  char* argv[] = {arg0, nullptr};
  if (posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ) != 0) return -1;
  int status = 0;
  return waitpid(pid, &status, 0) == pid ? status : -1;
}

int vfork_exit() {
  pid_t pid = vfork();
  if (pid == 0) _exit(0);
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid ? status : -1;
}

int system_true() {
  return std::system("true");
}

long n_calls = 0;

void* worker(void*) {
  prctl(PR_SET_NAME, "worker");
  long sum = 0;
  for (long i = 0; i < n_calls; ++i) sum += work(i);
  return reinterpret_cast<void*>(sum);
}

long names(long n) {
  n_calls = n;
  prctl(PR_SET_NAME, "main-new");
  pthread_t t;
  if (pthread_create(&t, nullptr, worker, nullptr) != 0) return -1;
  void* got = nullptr;
  pthread_join(t, &got);
  long sum = reinterpret_cast<long>(got);
  for (long i = 0; i < n; ++i) sum += work(i);
  prctl(PR_SET_NAME, "main-late");
  for (long i = 0; i < n; ++i) sum += work(i);
  return sum;
}

long tail(long n) {
  long double sum = 0;
  for (long i = 0; i < n; ++i) sum += strtold("1.5", nullptr);
  return static_cast<long>(sum);
}

void wait_line() {
  char line[16];
  if (!std::fgets(line, sizeof line, stdin)) std::exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  std::string mode = argv[1];
  long n = std::atol(argv[2]);
  bool with_stdin = argc > 3 && std::strcmp(argv[3], "stdin") == 0;
  if (with_stdin) {
    std::printf("ready\n");
    std::fflush(stdout);
    wait_line();
  }
  long r = -1;
  if (mode == "spawn") r = around(n, spawn_true);
  if (mode == "vfork") r = around(n, vfork_exit);
  if (mode == "system") r = around(n, system_true);
  if (mode == "deep") r = rec(n);
  if (mode == "coro") r = coroutines(n);
  if (mode == "tail") r = tail(n);
  if (mode == "names") r = names(n);
  std::printf("%s %ld: %ld\n", mode.c_str(), n, r);
  std::fflush(stdout);
  if (with_stdin) wait_line();
  return r < 0;
}
