// A single thread that spends nearly all its time inside a restartable sequence of its own
// (issue 23 §1c): a tracer that borrows it for an injected call must not cost it the abort the
// kernel owes it. Each round enters the sequence (rseq_cs = its descriptor), spins, then, still
// inside, looks at rseq_cs: inside a sequence it is the descriptor unless somebody made the
// kernel clear it (the thread resumed outside the sequence and put back in it: "lost"). The
// commit counts "completed"; the abort handler counts "aborts". Between rounds it calls
// probe_fn() (for a probe) and polls stdin; "stop" ends it with
//   lost=L aborts=A completed=C
// after "ready" at the start.
#include <poll.h>
#include <sys/rseq.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace {

volatile long g_sink = 0;
long g_lost = 0, g_aborts = 0, g_completed = 0;

// One round: 0 completed, 1 aborted, 2 found rseq_cs cleared inside the sequence.
long round_in_sequence(struct rseq* rs) {
  long outcome;
  asm volatile(
      ".pushsection __rseq_cs, \"aw\"\n"
      ".balign 32\n"
      "3:\n"
      ".long 0, 0\n"
      ".quad 1f, 2f - 1f, 4f\n"
      ".popsection\n"
      "leaq 3b(%%rip), %%rax\n"
      "movq %%rax, 8(%[rs])\n"
      "1:\n"
      "movl $200000, %%ecx\n"
      "5: decl %%ecx\n"
      "jnz 5b\n"
      "movq 8(%[rs]), %%rdx\n"
      "cmpq %%rax, %%rdx\n"
      "jne 6f\n"
      "movq $0, %[out]\n"
      "2:\n"
      "jmp 7f\n"
      ".long 0x53053053\n"  // RSEQ_SIG on x86
      "4:\n"
      "movq $1, %[out]\n"
      "jmp 7f\n"
      "6:\n"
      "movq $2, %[out]\n"
      "7:\n"
      : [out] "=m"(outcome)
      : [rs] "r"(rs)
      : "rax", "rcx", "rdx", "memory", "cc");
  return outcome;
}

}  // namespace

extern "C" __attribute__((noinline)) void probe_fn(long i) {
  g_sink = g_sink + i;
  asm volatile("" ::: "memory");
}

int main() {
  if (__rseq_size == 0) {
    std::fprintf(stderr, "rseq_spin: no rseq registration (glibc.pthread.rseq=0?)\n");
    return 77;
  }
  auto* rs = reinterpret_cast<struct rseq*>(static_cast<char*>(__builtin_thread_pointer()) +
                                            __rseq_offset);
  std::printf("ready\n");
  std::fflush(stdout);
  for (long i = 0;; ++i) {
    switch (round_in_sequence(rs)) {
      case 0:
        ++g_completed;
        break;
      case 1:
        ++g_aborts;
        break;
      default:
        ++g_lost;
        break;
    }
    probe_fn(i);
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) {
      char line[16] = "";
      if (!std::fgets(line, sizeof line, stdin) || std::strncmp(line, "stop", 4) == 0) break;
    }
  }
  std::printf("lost=%ld aborts=%ld completed=%ld\n", g_lost, g_aborts, g_completed);
  return 0;
}
