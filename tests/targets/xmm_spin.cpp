// A thread spinning with values live in xmm8, xmm9 and xmm15 (and checking them), and an
// IFUNC of this program that nothing calls (no relocation resolves it: probecost calls its
// resolver in the process), whose resolver clobbers those registers, as the ABI lets any
// function (and another whose resolver never returns). Prints "ready", spins until a line on
// stdin, then prints "xmm intact" or "xmm changed" (tests/trace/test_injected_call.cpp).
#include <pthread.h>
#include <unistd.h>

#include <cstdio>

extern "C" {
int xmm_spin_impl(int x) {
  return x + 1;
}
using Impl = int (*)(int);
Impl xmm_spin_resolve() {
  __asm__ volatile("pcmpeqd %%xmm8, %%xmm8\n pxor %%xmm9, %%xmm9\n pcmpeqd %%xmm15, %%xmm15\n" ::
                       : "xmm8", "xmm9", "xmm15");
  return xmm_spin_impl;
}
int xmm_spin_ifunc(int) __attribute__((ifunc("xmm_spin_resolve")));
// Another that nothing calls, whose resolver never returns and makes no system call: a
// resolver called in the process must be given up on (tracer/core/remote_calls_function.cpp).
volatile int never;
Impl xmm_spin_stuck_resolve() {
  while (!never) {
  }
  return xmm_spin_impl;
}
int xmm_spin_stuck(int) __attribute__((ifunc("xmm_spin_stuck_resolve")));
}

volatile int stop;

void* wait_line(void*) {
  char c;
  while (read(0, &c, 1) == 1 && c != '\n') {
  }
  stop = 1;
  return nullptr;
}

int main(void) {
  pthread_t t;
  long bad = 0;
  std::printf("ready\n");
  std::fflush(stdout);
  pthread_create(&t, nullptr, wait_line, nullptr);
  __asm__ volatile(
      "mov $0x1234, %%eax\n movq %%rax, %%xmm8\n movq %%rax, %%xmm9\n movq %%rax, %%xmm15\n"
      "1:\n"
      "movq %%xmm8, %%rdx\n cmp %%rax, %%rdx\n jne 2f\n"
      "movq %%xmm9, %%rdx\n cmp %%rax, %%rdx\n jne 2f\n"
      "movq %%xmm15, %%rdx\n cmp %%rax, %%rdx\n jne 2f\n"
      "cmpl $0, %1\n je 1b\n jmp 3f\n"
      "2: mov $1, %0\n"
      "3:\n"
      : "+r"(bad)
      : "m"(stop)
      : "rax", "rdx", "xmm8", "xmm9", "xmm15", "cc");
  pthread_join(t, nullptr);
  std::printf("xmm %s\n", bad ? "changed" : "intact");
  return 0;
}
