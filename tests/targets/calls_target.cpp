// The tracee of the record tests: functions whose calls are known exactly, called in one of
// several ways (argv[1]), N times (argv[2]), printing what it computed so that a traced run's
// output can be compared with an untraced one's.
//   calls N      add3(i, 2i, 3i) N times, and leaf(i): arguments and return values known
//   recurse N    depth(N): N + 1 nested calls of one function
//   tail N       tail_caller(i) N times: it leaves by a tail jmp into leaf
//   throw N      middle(i) N times; thrower throws for every third i, caught in main
//   longjmp N    jumper(i) N times, every other one longjmps out to main
//   threads N    4 threads, add3 N times each
//   nthreads N K K threads (argv[3]), add3 N times each, in a tight loop
//   signal N     in_signal(i) N times; each raises SIGUSR1, whose handler calls leaf
//   spin N       spin(ticks) N times: spins for `ticks` TSC ticks (argv[3])
//   bench N      add3 N times in a loop, timed: prints the ns per iteration (probe costs)
//   serve        reads "N\n" lines on stdin, calls add3 N times per line, answers the sum
//   cond_tail N  cond_tail(i) N times, every other i negative: a taken conditional tail call
//   cold N       cold_caller(i) N times, every other i negative: through its unnamed cold part
//   indirect N   reg_tail, slot_tail, table_tail and switch4 (calls_indirect.S) of i, N times
//   ctor N       leaf(i) N times in a static constructor, before main, and N times in main
//   odd N        names its thread "t\xff\xfe-odd" (PR_SET_NAME: not UTF-8), then calls the function
//                whose symbol is "odd\xffname" (not UTF-8 either) N times: a report that must
//                survive the program's bytes
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <x86intrin.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>

#define NOINLINE __attribute__((noinline))
#define KEEP asm volatile("" ::: "memory")

extern "C" {

NOINLINE long add3(long a, long b, long c) {
  KEEP;
  return a + b + c;
}

// Its symbol holds byte 0xff, as a program may choose (an assembler takes any byte but NUL).
long odd_named(long x) __asm__(
    "odd\xff"
    "name");
NOINLINE long odd_named(long x) {
  KEEP;
  return x + 7;
}

NOINLINE long leaf(long x) {
  KEEP;
  return x * 2 + 1;
}

NOINLINE long depth(long n) {
  if (n == 0) return 0;
  long r = depth(n - 1);
  KEEP;
  return r + 1;
}

// Leaves by a tail jmp into leaf (checked in the test by its disassembly's shape: a jmp).
NOINLINE long tail_caller(long x) {
  KEEP;
  return leaf(x + 1);
}

NOINLINE long spin(unsigned long ticks) {
  unsigned long start = __rdtsc();
  long n = 0;
  while (__rdtsc() - start < ticks) ++n;
  return n > 0;
}

// Shapes the compiler will not produce on demand, written out.
// cond_tail(x): x < 0 ? leaf(x) : x + 1, by a conditional tail call. The unreachable indirect
// jump makes every exit an int3 (no patch goes where a jump table might land).
// cold_caller(x): x < 0 ? 1 - x : x + 1, its x < 0 side in a part of its own with no symbol (a
// stripped binary's f.cold): the js to it leaves the function's bytes but not its frame.
asm(R"(
  .text
  .globl cond_tail
  .type cond_tail, @function
cond_tail:
  .cfi_startproc
  test %rdi, %rdi
  js leaf
  lea 1(%rdi), %rax
  ret
  jmp *%rax
  .cfi_endproc
  .size cond_tail, .-cond_tail

  .globl cold_caller
  .type cold_caller, @function
cold_caller:
  .cfi_startproc
  push %rbx
  .cfi_adjust_cfa_offset 8
  .cfi_offset %rbx, -16
  mov %rdi, %rbx
  test %rdi, %rdi
  js .Lcold_caller_cold
.Lcold_caller_back:
  lea 1(%rbx), %rax
  pop %rbx
  .cfi_adjust_cfa_offset -8
  ret
  .cfi_endproc
  .size cold_caller, .-cold_caller
  int3
.Lcold_caller_cold:
  .cfi_startproc
  .cfi_def_cfa_offset 16
  .cfi_offset %rbx, -16
  neg %rbx
  jmp .Lcold_caller_back
  .cfi_endproc
)");
long cond_tail(long x);
long cold_caller(long x);
long reg_tail(long x);
long slot_tail(long x);
long table_tail(long x);
long switch4(long x);

}  // extern "C"

NOINLINE long thrower(long i) {
  if (i % 3 == 0) throw std::runtime_error("third");
  KEEP;
  return i;
}

NOINLINE long middle(long i) {
  long r = thrower(i);
  KEEP;
  return r + 1;
}

static jmp_buf escape;

extern "C" NOINLINE long jumper(long i) {
  if (i % 2) longjmp(escape, 1);
  KEEP;
  return i;
}

extern "C" NOINLINE long in_signal(long i) {
  raise(SIGUSR1);
  KEEP;
  return i;
}

static volatile long handled = 0;
static void on_usr1(int) {
  handled = handled + leaf(handled % 1000);
}

// glibc passes an ELF constructor argc and argv: with "ctor N", N calls before main.
static long before_main = 0;
__attribute__((constructor)) static void early_calls(int argc, char** argv) {
  if (argc < 3 || std::strcmp(argv[1], "ctor") != 0) return;
  for (long i = 0, n = std::atol(argv[2]); i < n; ++i) before_main += leaf(i);
}

static void* thread_main(void* arg) {
  long n = reinterpret_cast<long>(arg), sum = 0;
  for (long i = 0; i < n; ++i) sum += add3(i, 1, 1);
  return reinterpret_cast<void*>(sum);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string mode = argv[1];
  long n = argc > 2 ? std::atol(argv[2]) : 0;
  static long sum = 0;  // static: longjmp leaves it as it was
  if (mode == "calls") {
    for (long i = 0; i < n; ++i) sum += add3(i, 2 * i, 3 * i) + leaf(i);
  } else if (mode == "recurse") {
    sum = depth(n);
  } else if (mode == "tail") {
    for (long i = 0; i < n; ++i) sum += tail_caller(i);
  } else if (mode == "throw") {
    for (long i = 0; i < n; ++i) {
      try {
        sum += middle(i);
      } catch (const std::runtime_error&) {
        sum += 1000;
      }
    }
  } else if (mode == "longjmp") {
    static long i;  // not on the stack setjmp saved: it survives the longjmp
    for (i = 0; i < n; ++i) {
      if (setjmp(escape) == 0) {
        sum += jumper(i);
      } else {
        sum += 1000;
      }
    }
  } else if (mode == "threads") {
    pthread_t t[4];
    for (auto& th : t) pthread_create(&th, nullptr, thread_main, reinterpret_cast<void*>(n));
    for (auto& th : t) {
      void* r = nullptr;
      pthread_join(th, &r);
      sum += reinterpret_cast<long>(r);
    }
  } else if (mode == "nthreads") {
    long k = argc > 3 ? std::atol(argv[3]) : 1;
    if (k < 1 || k > 64) return 2;
    pthread_t t[64];
    for (long i = 0; i < k; ++i)
      pthread_create(&t[i], nullptr, thread_main, reinterpret_cast<void*>(n));
    for (long i = 0; i < k; ++i) {
      void* r = nullptr;
      pthread_join(t[i], &r);
      sum += reinterpret_cast<long>(r);
    }
  } else if (mode == "signal") {
    signal(SIGUSR1, on_usr1);
    for (long i = 0; i < n; ++i) sum += in_signal(i);
    sum += handled;
  } else if (mode == "spin") {
    unsigned long ticks = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 100000;
    for (long i = 0; i < n; ++i) sum += spin(ticks);
  } else if (mode == "bench") {
    timespec t0{}, t1{};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; ++i) sum += add3(i, 1, 2);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    std::printf("%.2f ns per call\n", n ? ns / static_cast<double>(n) : 0.0);
  } else if (mode == "cond_tail") {
    for (long i = 0; i < n; ++i) sum += cond_tail(i % 2 ? -i : i);
  } else if (mode == "cold") {
    for (long i = 0; i < n; ++i) sum += cold_caller(i % 2 ? -i : i);
  } else if (mode == "ctor") {
    for (long i = 0; i < n; ++i) sum += leaf(i);
    sum += before_main;
  } else if (mode == "odd") {
    prctl(PR_SET_NAME, "t\xff\xfe-odd");  // what the tests also name the link they run it by
    for (long i = 0; i < n; ++i) sum += odd_named(i);
  } else if (mode == "indirect") {
    for (long i = 0; i < n; ++i) sum += reg_tail(i) + slot_tail(i) + table_tail(i) + switch4(i);
  } else if (mode == "serve") {
    std::printf("ready\n");
    std::fflush(stdout);
    char line[64];
    while (std::fgets(line, sizeof line, stdin)) {
      long k = std::atol(line), s = 0;
      for (long i = 0; i < k; ++i) s += add3(i, 1, 2);
      std::printf("%ld\n", s);
      std::fflush(stdout);
    }
  } else {
    return 2;
  }
  std::printf("%s %ld %ld\n", mode.c_str(), n, sum);
  return 0;
}
