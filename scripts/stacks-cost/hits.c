// The tracee of scripts/stacks-cost.sh: calls hit() N times, GAP multiply-adds of work apart,
// from DEPTH nested frames of FRAME bytes each, under PAD bytes of its caller's stack (so that a
// snapshot of up to 64 KiB finds that much stack above %rsp), and prints the cost per
// iteration: ns (CLOCK_MONOTONIC) and TSC ticks, and the sum it computed (the same traced or
// not).
//   hits N [GAP [DEPTH [FRAME [PAD]]]]      defaults: no gap, 8 frames of 256 bytes, 64 KiB
// Built -O2 without frame pointers, as Debian builds its packages: the unwinder needs CFI.
#include <alloca.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

#define NOINLINE __attribute__((noinline))

NOINLINE long hit(long x) {
  __asm__ volatile("" ::: "memory");
  return x * 3 + 1;
}

static unsigned long gap;
static unsigned long long worked = 1;

// GAP dependent multiply-adds: work of the program's own between two hits (a few ns each
// here, more under load), the same traced or not.
static void work(void) {
  unsigned long long x = worked;
  for (unsigned long i = 0; i < gap; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    __asm__ volatile("" : "+r"(x));
  }
  worked = x;
}

static long loop(long n) {
  struct timespec t0, t1;
  long sum = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  unsigned long long c0 = __rdtsc();
  for (long i = 0; i < n; ++i) {
    sum += hit(i);
    if (gap) work();
  }
  unsigned long long c1 = __rdtsc();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
  printf("%.2f ns %.1f ticks per iteration\n", ns / (double)n, (double)(c1 - c0) / (double)n);
  return sum;
}

// A frame of `frame` bytes the compiler cannot drop: its bytes are written and read.
NOINLINE long nest(long n, int depth, size_t frame) {
  volatile char* buf = alloca(frame);
  buf[0] = (char)depth;
  long r = depth ? nest(n, depth - 1, frame) : loop(n);
  return r + buf[0] - (char)depth;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  long n = atol(argv[1]);
  gap = argc > 2 ? strtoul(argv[2], NULL, 10) : 0;
  int depth = argc > 3 ? atoi(argv[3]) : 8;
  size_t frame = argc > 4 ? strtoul(argv[4], NULL, 10) : 256;
  size_t pad = argc > 5 ? strtoul(argv[5], NULL, 10) : 65536;
  if (n < 1 || depth < 0 || depth > 10000 || frame < 16) return 2;
  volatile char* p = alloca(pad + 16);
  memset((char*)p, 0, pad + 16);
  printf("sum %ld\n", nest(n, depth, frame) + p[pad]);
  return 0;
}
