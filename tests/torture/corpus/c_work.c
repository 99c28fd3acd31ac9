/* Compiled C of many shapes, built at -O0, -O2 and -O3, PIE and not, with and without
 * -fcf-protection: loops, a switch (a jump table at -O2), recursion, string and floating-point
 * work, bit tricks, struct copies, indirect and tail calls, a variable-length array, globals
 * (RIP-relative in a PIE, absolute otherwise). Prints a checksum of every result.
 *
 * Built with -DTORTURE_MDWE, it first re-executes itself with PR_SET_MDWE (no memory may become
 * executable after it was writable) and a seccomp filter that refuses anonymous executable
 * memory, the way a MemoryDenyWriteExecute= service runs: a tracer can map no code into it. */
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "torture.h"

#define NOINLINE __attribute__((noinline))

static volatile int g_sink;
static int g_counter;
static long g_table[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};

struct pair {
  long a, b;
  char name[24];
  double d;
};

NOINLINE long t_sum_array(const int* a, int n) {
  long s = 0;
  for (int i = 0; i < n; ++i) {
    if (a[i] & 1)
      s += a[i] * 3;
    else
      s -= a[i] / 2;
  }
  return s;
}

NOINLINE int t_switch(int x) {
  switch (x % 11) {
    case 0:
      return x * 7;
    case 1:
      return x + 13;
    case 2:
      return x ^ 0x55;
    case 3:
      return x - 100;
    case 4:
      return x << 2;
    case 5:
      return x >> 1;
    case 6:
      return ~x;
    case 7:
      return x * x;
    case 8:
      return -x;
    case 9:
      return x | 0x100;
    default:
      return 42;
  }
}

NOINLINE size_t t_strops(char* dst, const char* src) {
  size_t n = strlen(src);
  memcpy(dst, src, n + 1);
  for (size_t i = 0; i < n / 2; ++i) {
    char c = dst[i];
    dst[i] = dst[n - 1 - i];
    dst[n - 1 - i] = c;
  }
  return n + (size_t)(unsigned char)dst[0];
}

NOINLINE double t_float(double x) {
  double y = 1.0, term = 1.0;
  for (int i = 1; i < 12; ++i) {
    term *= x / i;
    y += term;
  }
  return y * 0.5 + (x > 1.0 ? x * x : -x);
}

NOINLINE long t_recurse(int n) {
  if (n < 2) return n;
  return t_recurse(n - 1) + t_recurse(n - 2) + (n & 3);
}

NOINLINE unsigned long t_bits(unsigned long x) {
  unsigned long r = __builtin_bswap64(x);
  r ^= (x << 13) | (x >> 51);
  r += (unsigned long)__builtin_popcountl(x) * 0x9e3779b97f4a7c15ul;
  if (x & 0x80) r = ~r;
  r = x > r ? x - r : r - x;
  return r + (unsigned long)__builtin_ctzl(x | 1);
}

NOINLINE void t_struct(struct pair* out, const struct pair* in, int k) {
  struct pair tmp = *in;
  tmp.a += k;
  tmp.b -= k;
  tmp.name[k % 20] = (char)('a' + k % 26);
  tmp.d *= 1.5;
  *out = tmp;
}

NOINLINE int t_flags(int a, int b) {
  int r = (a < b) + (a == b) * 2 + (a > b) * 4;
  unsigned ua = (unsigned)a, ub = (unsigned)b;
  r += ua < ub ? 8 : 16;
  return r + (a > 0 ? a : -a) % 7;
}

NOINLINE long t_local_array(int n) {
  long buf[64];
  memset(buf, 0, sizeof buf);
  for (int i = 0; i < n && i < 64; ++i) buf[i] = i * (long)n;
  long s = 0;
  for (int i = 0; i < 64; ++i) s += buf[i] ^ i;
  return s;
}

static long helper_a(long x) { return x * 3 + 1; }
static long helper_b(long x) { return x / 2; }

NOINLINE long t_indirect(long x, int which) {
  long (*fns[2])(long) = {helper_a, helper_b};
  long (*f)(long) = fns[which & 1];
  g_sink = (int)which;
  return f(x) + f(x + 1);
}

NOINLINE long t_vla(int n) {
  long v[n + 1];
  for (int i = 0; i <= n; ++i) v[i] = (long)i * i;
  long s = 0;
  for (int i = n; i >= 0; --i) s = s * 3 + v[i];
  return s;
}

NOINLINE long t_global(int i) {
  g_counter += i;
  g_table[i & 15] += g_counter;
  return g_table[(i + 3) & 15] + g_counter;
}

NOINLINE long t_tail(long x);
NOINLINE long t_tail_helper(long x) { return x < 3 ? x : t_tail(x - 3) + 1; }
NOINLINE long t_tail(long x) {
  if (x & 1) return t_tail_helper(x - 1);
  return t_tail_helper(x / 2);
}

NOINLINE int t_nested(int n) {
  int found = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if ((i * j) % 7 == 3) continue;
      if (i + j > n + 3) break;
      found += i ^ j;
    }
    if (found > 10000) goto out;
  }
out:
  return found;
}

#ifdef TORTURE_MDWE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#define PR_MDWE_REFUSE_EXEC_GAIN 1
#endif
/* A MemoryDenyWriteExecute-style seccomp filter: anonymous executable memory (mmap with
 * PROT_EXEC and MAP_ANONYMOUS) and mprotect to PROT_EXEC fail with EPERM; files still map
 * executable, so the dynamic loader works. */
static void refuse_exec_memory(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mprotect, 5, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 0, 7),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[3])),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, MAP_ANONYMOUS, 0, 5),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
      BPF_JUMP(BPF_JMP | BPF_JA, 1, 0, 0),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1 /* EPERM */),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof f / sizeof f[0], f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
    perror("seccomp");
    exit(3);
  }
}

/* Runs the program again under PR_SET_MDWE and the filter, which execve keeps: a tracer can map
 * no code into it, nor make any memory executable. */
static void rerun_under_mdwe(char** argv) {
  if (argv[1] && strcmp(argv[1], "--mdwe") == 0) return;
  /* Before Linux 6.3 there is no PR_SET_MDWE: the seccomp filter alone then. */
  prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0);
  refuse_exec_memory();
  char* args[] = {argv[0], (char*)"--mdwe", NULL};
  execv("/proc/self/exe", args);
  perror("execv");
  exit(3);
}
#endif

int main(int argc, char** argv) {
  (void)argc;
#ifdef TORTURE_MDWE
  rerun_under_mdwe(argv);
#else
  (void)argv;
#endif
  uint64_t h = TORTURE_SEED;
  int arr[40];
  for (int i = 0; i < 40; ++i) arr[i] = (i * 37) % 23 - 7;
  static const char* words[] = {"torture", "relocation", "x", "", "probecost trace"};
  struct pair p = {1, 2, "pair", 0.25}, q;
  char buf[64];
  for (int i = 0; i < 24; ++i) {
    h = torture_mix(h, (uint64_t)t_sum_array(arr, i + 3));
    h = torture_mix(h, (uint64_t)t_switch(i * 5 + 1));
    h = torture_mix(h, t_strops(buf, words[i % 5]));
    h = torture_mix(h, (uint64_t)(t_float(i * 0.125) * 1e6));
    h = torture_mix(h, (uint64_t)t_recurse(i % 9));
    h = torture_mix(h, t_bits((uint64_t)i * 0x12345679u + 77));
    t_struct(&q, &p, i);
    p = q;
    h = torture_mix(h, (uint64_t)(p.a ^ p.b) + (uint64_t)p.name[i % 20]);
    h = torture_mix(h, (uint64_t)t_flags(i - 12, 5 - i % 11));
    h = torture_mix(h, (uint64_t)t_local_array(i * 3));
    h = torture_mix(h, (uint64_t)t_indirect(i * 11, i));
    h = torture_mix(h, (uint64_t)t_vla(i % 13));
    h = torture_mix(h, (uint64_t)t_global(i));
    h = torture_mix(h, (uint64_t)t_tail(i * 7));
    h = torture_mix(h, (uint64_t)t_nested(i % 10));
  }
  torture_print("c_work", h);
  return 0;
}
