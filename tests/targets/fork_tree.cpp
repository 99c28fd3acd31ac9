// A process tree for --follow-forks: the root calls probe_me() ROOT times, then makes CHILDREN
// children with fork(); child i calls it (i + 1) * K times; the first child also forks a
// grandchild (K calls), the second runs two threads (K calls each), and the last execs this
// program again through vfork() (leaf mode: K calls). Every process prints its own count:
//   pid=<pid> calls=<n>
// fork_tree ROOT CHILDREN K        (leaf mode: fork_tree leaf K)
//
// fork_tree vm K: calls probe_me() 2K times, then a clone(CLONE_VM) child (a process of its own
// that shares our memory) calls it K times; both counts are printed once the child is reaped.
//
// fork_tree vfork-cpu N: N times, a vfork() child reads the cpu_id of the struct rseq it runs
// on (its parent's: the child has no thread pointer of its own) and writes it to a pipe before
// _exit; then the parent reads its own. Each round prints "child_cpu=<c> parent_cpu=<p>"
// (-1: RSEQ_CPU_ID_UNINITIALIZED; -2: glibc registered no rseq).
//
// fork_tree serve: says "ready", then for each line "fork K" on stdin calls probe_me() once and
// forks a child that calls it K times and exits; once the child is reaped it answers
// "child=<pid> status=<wait status>". "quit" (or the end of stdin) ends it. "forksig K": the
// same, and the child exits 3 instead of 0 if its SIGTRAP disposition is not the program's own
// (own_trap, set at start). "forkstop K": the same, but the child says "stopping=<pid>"
// after its calls and stops itself (SIGSTOP), and looks at its disposition once continued.
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/rseq.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

extern "C" void probe_me(long i);

namespace {

std::atomic<long> calls{0};
volatile long sink = 0;

void report() {
  std::printf("pid=%d calls=%ld\n", static_cast<int>(::getpid()), calls.load());
  std::fflush(stdout);
}

void own_trap(int) {}

// 0 when the SIGTRAP disposition is own_trap, as the program set it; 3 when it is anything else
// (a tracer's handler left behind).
int own_sigtrap_status() {
  struct sigaction sa {};
  ::sigaction(SIGTRAP, nullptr, &sa);
  return sa.sa_handler == own_trap ? 0 : 3;
}

void call_n(long n) {
  for (long i = 0; i < n; ++i) probe_me(i);
}

void* thread_main(void* arg) {
  call_n(*static_cast<long*>(arg));
  return nullptr;
}

// Reaps every child; one that did not exit with 0 is said ("failed=<pid> status=<status>").
void wait_all() {
  int status;
  pid_t c;
  while ((c = ::wait(&status)) > 0) {
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("failed=%d status=%d\n", static_cast<int>(c), status);
      std::fflush(stdout);
    }
  }
}

// This thread's struct rseq cpu_id (glibc's registration, __rseq_offset from the thread pointer).
int rseq_cpu_id() {
  if (__rseq_size == 0) return -2;
  auto* area = reinterpret_cast<volatile struct rseq*>(
      static_cast<char*>(__builtin_thread_pointer()) + __rseq_offset);
  return static_cast<int>(area->cpu_id);
}

// A vfork() child that writes its rseq cpu_id to `fd` and exits (its own frame: the loop's
// variables are not the child's to clobber).
__attribute__((noinline)) pid_t vfork_reporting_cpu(int fd) {
  pid_t c = ::vfork();
  if (c == 0) {
    int cpu = rseq_cpu_id();
    ssize_t w = ::write(fd, &cpu, sizeof cpu);
    ::_exit(w == sizeof cpu ? 0 : 1);
  }
  return c;
}

int vfork_cpu(long rounds) {
  for (long r = 0; r < rounds; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) return 1;
    pid_t c = vfork_reporting_cpu(fds[1]);
    int child_cpu = -3, status = 0;
    ::waitpid(c, &status, 0);
    if (::read(fds[0], &child_cpu, sizeof child_cpu) != sizeof child_cpu) child_cpu = -3;
    ::close(fds[0]);
    ::close(fds[1]);
    probe_me(r);
    std::printf("child_cpu=%d parent_cpu=%d\n", child_cpu, rseq_cpu_id());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

// The probed function: its own counter, and enough instructions for a jump to fit.
extern "C" __attribute__((noinline)) void probe_me(long i) {
  calls.fetch_add(1, std::memory_order_relaxed);
  sink = sink + i;
}

int main(int argc, char** argv) {
  // Several processes write lines to one open file: without O_APPEND their shared offset races
  // (a memfd, as the tests use, does not serialise it) and lines overwrite each other.
  ::fcntl(STDOUT_FILENO, F_SETFL, ::fcntl(STDOUT_FILENO, F_GETFL) | O_APPEND);
  if (argc == 3 && std::strcmp(argv[1], "leaf") == 0) {
    call_n(std::atol(argv[2]));
    report();
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "vm") == 0) {
    static long k = std::atol(argv[2]);
    static char stack[1 << 16];
    call_n(2 * k);
    auto child = [](void*) -> int {
      call_n(k);  // no libc here: the child shares our memory, TLS and all
      return 0;
    };
    pid_t c = ::clone(child, stack + sizeof stack, CLONE_VM | SIGCHLD, nullptr);
    int status = 0;
    ::waitpid(c, &status, 0);
    std::printf("pid=%d calls=%ld\npid=%d calls=%ld\n", static_cast<int>(c), k,
                static_cast<int>(::getpid()), calls.load() - k);
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "vfork-cpu") == 0) return vfork_cpu(std::atol(argv[2]));
  if (argc == 2 && std::strcmp(argv[1], "serve") == 0) {
    std::printf("ready\n");
    std::fflush(stdout);
    struct sigaction sa {};
    sa.sa_handler = own_trap;
    ::sigaction(SIGTRAP, &sa, nullptr);
    char line[64], cmd[16];
    long k = 0;
    while (std::fgets(line, sizeof line, stdin) && std::sscanf(line, "%15s %ld", cmd, &k) == 2) {
      std::string_view what(cmd);
      if (what != "fork" && what != "forksig" && what != "forkstop") break;
      probe_me(0);
      pid_t c = ::fork();
      if (c == 0) {
        call_n(k);
        if (what == "forkstop") {
          std::printf("stopping=%d\n", static_cast<int>(::getpid()));
          std::fflush(stdout);
          ::raise(SIGSTOP);
        }
        std::_Exit(what == "fork" ? 0 : own_sigtrap_status());
      }
      int status = 0;
      ::waitpid(c, &status, 0);
      std::printf("child=%d status=%d\n", static_cast<int>(c), status);
      std::fflush(stdout);
    }
    return 0;
  }
  if (argc != 4) {
    std::fprintf(stderr, "usage: fork_tree ROOT CHILDREN K | fork_tree leaf K\n");
    return 2;
  }
  long root = std::atol(argv[1]), children = std::atol(argv[2]), k = std::atol(argv[3]);
  call_n(root);
  for (long i = 0; i < children; ++i) {
    if (i == children - 1 && i > 0) {
      // vfork + exec: the child shares our memory until its exec.
      char kbuf[32];
      std::snprintf(kbuf, sizeof kbuf, "%ld", k);
      pid_t c = ::vfork();
      if (c == 0) {
        ::execl("/proc/self/exe", argv[0], "leaf", kbuf, static_cast<char*>(nullptr));
        ::_exit(127);
      }
      continue;
    }
    pid_t c = ::fork();
    if (c != 0) continue;
    calls = 0;  // the child's own count
    call_n((i + 1) * k);
    if (i == 0) {
      if (::fork() == 0) {
        calls = 0;
        call_n(k);
        report();
        std::_Exit(0);
      }
      wait_all();
    } else if (i == 1) {
      long n = k;
      pthread_t a, b;
      ::pthread_create(&a, nullptr, thread_main, &n);
      ::pthread_create(&b, nullptr, thread_main, &n);
      ::pthread_join(a, nullptr);
      ::pthread_join(b, nullptr);
    }
    report();
    std::_Exit(0);
  }
  wait_all();
  report();
  return 0;
}
