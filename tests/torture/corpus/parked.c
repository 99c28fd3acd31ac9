/* A signal handler parked over a probed range, for a tracer that attaches meanwhile: t_park's
 * load from a protected page faults, and the SIGSEGV handler says "parked" on fd 3 (when the
 * suite gave one) and waits for a line on stdin before it makes the page readable and returns,
 * which runs the load again. While it waits, the RIP saved in its signal frame is inside
 * t_park: a jump over that instruction would send the return into the middle of the jump. Then
 * t_park and t_after run in a loop, and a checksum is printed. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "torture.h"

#define FUNC(name) ".globl " #name "\n.type " #name ", @function\n" #name ":\n"
#define END(name) ".size " #name ", .-" #name "\n"

asm(".text\n"
    /* int t_park(int* p): *p + 4 */
    FUNC(t_park)
    "  mov $1, %eax\n"
    "  lea 2(%rax), %rcx\n"
    ".globl park_fault\npark_fault:\n"
    "  mov (%rdi), %edx\n"
    "  add %ecx, %edx\n"
    "  lea (%rdx,%rax), %eax\n"
    "  ret\n" END(t_park)
    /* long t_after(long x): 3x + 1 */
    FUNC(t_after)
    "  lea (%rdi,%rdi,2), %rax\n"
    "  add $1, %rax\n"
    "  ret\n" END(t_after));

int t_park(int* p);
long t_after(long x);
extern char park_fault[];

static char* g_page;
static int g_parks;

static void on_segv(int sig, siginfo_t* si, void* ctx) {
  (void)sig;
  ucontext_t* uc = ctx;
  if ((char*)uc->uc_mcontext.gregs[REG_RIP] != park_fault || (char*)si->si_addr != g_page) {
    static const char msg[] = "parked: SIGSEGV at an unknown instruction\n";
    write(2, msg, sizeof msg - 1);
    _exit(99);
  }
  if (g_parks++ == 0 && fcntl(3, F_GETFD) != -1) {
    static const char ready[] = "parked\n";
    write(3, ready, sizeof ready - 1);
    char c = 0;
    while (read(0, &c, 1) == 1 && c != '\n') {
    }
  }
  mprotect(g_page, 4096, PROT_READ);
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
  g_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g_page == MAP_FAILED) exit(3);
  *(int*)g_page = 38;
  mprotect(g_page, 4096, PROT_NONE);
  uint64_t h = TORTURE_SEED;
  for (long i = 0; i < 40; ++i) {
    h = torture_mix(h, (uint64_t)t_park((int*)g_page));
    h = torture_mix(h, (uint64_t)t_after(i));
    if (i % 8 == 7) mprotect(g_page, 4096, PROT_NONE);
  }
  h = torture_mix(h, (uint64_t)g_parks);
  printf("parks %d\n", g_parks);
  torture_print("parked", h);
  return 0;
}
