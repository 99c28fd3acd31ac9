/* Fault handlers that recognise the faulting instruction by its address, as HotSpot's SafeFetch,
 * Go's runtime and the sanitizers do: SIGSEGV (a load from an unmapped page, continued after
 * it; a store to a protected page, retried once the page is writable), SIGFPE (a division by
 * zero), SIGILL (ud2) and SIGBUS (a load past the end of a mapped file). Each handler checks
 * RIP, si_addr and the registers the faulting instruction reads against what the original
 * instruction gives; anything else means the program would misbehave, and it exits 99. One
 * SIGSEGV handler leaves by siglongjmp, so it never returns through rt_sigreturn. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "torture.h"

#define FUNC(name) ".globl " #name "\n.type " #name ", @function\n" #name ":\n"
#define END(name) ".size " #name ", .-" #name "\n"
#define LABEL(name) ".globl " #name "\n" #name ":\n"

asm(".text\n"
    /* int t_safefetch32(int* adr, int err): *adr, or err if it cannot be read. */
    FUNC(t_safefetch32)
    "  mov %esi, %eax\n"
    "  lea 0(%rdi), %rdi\n"
    "  nop\n" LABEL(safefetch_fault) "  movl (%rdi), %eax\n" LABEL(safefetch_cont)
    "  add $0, %eax\n"
    "  mov %eax, %ecx\n"
    "  mov %ecx, %eax\n"
    "  ret\n" END(t_safefetch32)
    /* long t_divide(long a, long b): a / b, or -1 when b is 0. */
    FUNC(t_divide)
    "  mov %rdi, %rax\n"
    "  xor %edx, %edx\n" LABEL(divide_fault) "  div %rsi\n" LABEL(divide_cont)
    "  add $1, %rax\n"
    "  ret\n" END(t_divide)
    /* long t_ud2(long x): x + 10, the ud2 skipped by the handler. */
    FUNC(t_ud2)
    "  lea 3(%rdi), %rax\n"
    "  nop\n" LABEL(ud2_fault) "  ud2\n"
    "  add $7, %rax\n"
    "  ret\n" END(t_ud2)
    /* long t_busload(char* p): p[0] + 2, or 0xbb + 2 when p is past the end of its file. */
    FUNC(t_busload)
    "  mov %rdi, %rcx\n"
    "  nop\n" LABEL(bus_fault) "  movzbl (%rcx), %eax\n"
    "  add $2, %eax\n"
    "  ret\n" END(t_busload)
    /* int t_retry(int* p): ++*p, retried by the handler once the page is writable. */
    FUNC(t_retry)
    "  mov %rdi, %rdx\n"
    "  nop\n" LABEL(retry_fault) "  addl $1, (%rdx)\n"
    "  mov (%rdx), %eax\n"
    "  ret\n" END(t_retry)
    /* long t_jmpload(long* p): *p + 5; the handler leaves by siglongjmp when p is unmapped. */
    FUNC(t_jmpload)
    "  mov %rdi, %rsi\n"
    "  nop\n" LABEL(jmpload_fault) "  mov (%rsi), %rax\n"
    "  add $5, %rax\n"
    "  ret\n" END(t_jmpload));

int t_safefetch32(int* adr, int err);
long t_divide(long a, long b);
long t_ud2(long x);
long t_busload(char* p);
int t_retry(int* p);
long t_jmpload(long* p);
extern char safefetch_fault[], safefetch_cont[], divide_fault[], divide_cont[], ud2_fault[],
    bus_fault[], retry_fault[], jmpload_fault[];

static char* g_retry_page;
static long g_faults[6];
static sigjmp_buf g_jmp;

static void wrong(const char* what, const ucontext_t* uc) {
  char msg[160];
  int n = snprintf(msg, sizeof msg, "safefetch: %s (RIP %llx)\n", what,
                   (unsigned long long)uc->uc_mcontext.gregs[REG_RIP]);
  write(2, msg, (size_t)n);
  _exit(99);
}

static greg_t* reg(ucontext_t* uc, int r) { return &uc->uc_mcontext.gregs[r]; }

static void on_segv(int sig, siginfo_t* si, void* ctx) {
  (void)sig;
  ucontext_t* uc = ctx;
  char* rip = (char*)*reg(uc, REG_RIP);
  if (rip == safefetch_fault) {
    if ((greg_t)si->si_addr != *reg(uc, REG_RDI)) wrong("SafeFetch: si_addr is not RDI", uc);
    *reg(uc, REG_RIP) = (greg_t)safefetch_cont;
    ++g_faults[0];
  } else if (rip == retry_fault) {
    if ((greg_t)si->si_addr != *reg(uc, REG_RDX)) wrong("retry: si_addr is not RDX", uc);
    mprotect(g_retry_page, 4096, PROT_READ | PROT_WRITE);
    ++g_faults[1];
  } else if (rip == jmpload_fault) {
    if ((greg_t)si->si_addr != *reg(uc, REG_RSI)) wrong("jmpload: si_addr is not RSI", uc);
    ++g_faults[5];
    siglongjmp(g_jmp, 1);
  } else {
    wrong("SIGSEGV at an unknown instruction", uc);
  }
}

static void on_fpe(int sig, siginfo_t* si, void* ctx) {
  (void)sig;
  ucontext_t* uc = ctx;
  if ((char*)*reg(uc, REG_RIP) != divide_fault) wrong("SIGFPE at an unknown instruction", uc);
  if ((char*)si->si_addr != divide_fault) wrong("SIGFPE: si_addr is not the instruction", uc);
  if (si->si_code != FPE_INTDIV || *reg(uc, REG_RSI) != 0) wrong("SIGFPE: not a division", uc);
  *reg(uc, REG_RAX) = -2;
  *reg(uc, REG_RIP) = (greg_t)divide_cont;
  ++g_faults[2];
}

static void on_ill(int sig, siginfo_t* si, void* ctx) {
  (void)sig;
  ucontext_t* uc = ctx;
  if ((char*)*reg(uc, REG_RIP) != ud2_fault) wrong("SIGILL at an unknown instruction", uc);
  if ((char*)si->si_addr != ud2_fault) wrong("SIGILL: si_addr is not the instruction", uc);
  *reg(uc, REG_RIP) += 2;
  ++g_faults[3];
}

static void on_bus(int sig, siginfo_t* si, void* ctx) {
  (void)sig;
  ucontext_t* uc = ctx;
  if ((char*)*reg(uc, REG_RIP) != bus_fault) wrong("SIGBUS at an unknown instruction", uc);
  if ((greg_t)si->si_addr != *reg(uc, REG_RCX)) wrong("SIGBUS: si_addr is not RCX", uc);
  *reg(uc, REG_RAX) = 0xbb;
  *reg(uc, REG_RIP) += 3;
  ++g_faults[4];
}

static void handle(int sig, void (*fn)(int, siginfo_t*, void*)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fn;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigaction(sig, &sa, NULL);
}

/* t_jmpload(p), or -5 when the handler jumped back here. */
static long load_or_jump(long* volatile p) {
  volatile long got = -5;
  if (sigsetjmp(g_jmp, 1) == 0) got = t_jmpload(p);
  return got;
}

/* Two pages of a one-page file: the second is past its end. */
static char* file_past_end(void) {
  int fd = memfd_create("torture-bus", 0);
  if (fd < 0 || ftruncate(fd, 4096) != 0) exit(3);
  char* p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) exit(3);
  close(fd);
  memset(p, 0x11, 4096);
  return p;
}

int main(void) {
  handle(SIGSEGV, on_segv);
  handle(SIGFPE, on_fpe);
  handle(SIGILL, on_ill);
  handle(SIGBUS, on_bus);
  char* none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  g_retry_page = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char* file = file_past_end();
  if (none == MAP_FAILED || g_retry_page == MAP_FAILED) exit(3);
  uint64_t h = TORTURE_SEED;
  int good = 1234;
  for (long i = 0; i < 30; ++i) {
    good += (int)i;
    h = torture_mix(h, (uint64_t)t_safefetch32(&good, -1));
    h = torture_mix(h, (uint64_t)t_safefetch32((int*)(none + (i % 4) * 64), -7));
    h = torture_mix(h, (uint64_t)t_divide(1000 + i, i % 3));
    h = torture_mix(h, (uint64_t)t_ud2(i));
    h = torture_mix(h, (uint64_t)t_busload(file + (i % 2) * 4096 + i));
    h = torture_mix(h, (uint64_t)t_retry((int*)g_retry_page + i));
    mprotect(g_retry_page, 4096, PROT_READ);
    long value = 100 + i;
    h = torture_mix(h, (uint64_t)load_or_jump(i % 2 ? (long*)(none + 128) : &value));
    h = torture_mix(h, (uint64_t)getuid());  // a system call after a handler that never returned
  }
  for (int k = 0; k < 6; ++k) h = torture_mix(h, (uint64_t)g_faults[k]);
  printf("faults: safefetch %ld retry %ld fpe %ld ill %ld bus %ld longjmp %ld\n", g_faults[0],
         g_faults[1], g_faults[2], g_faults[3], g_faults[4], g_faults[5]);
  torture_print("safefetch", h);
  return 0;
}
