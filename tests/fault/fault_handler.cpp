// Fault handlers that know the faulting instruction by its address (issue 15, items 3 and 4).
//   fault_handler --kind segv|fpe|ill|bus|park [--calls N | --attached] [--ctl-fd FD]
// segv, fpe, ill, bus: KIND_site faults on every other call (a load from an unmapped page, a
// division by zero, ud2, a load past the end of a file). Its handler checks RIP, si_addr and the
// registers against what the original instruction gives (each mismatch is a bad result), and
// continues after the instruction, as HotSpot's SafeFetch does.
// park: park_site's load faults once, before "ready"; the handler says "ready PID" and waits for
// "release" on stdin while its frame holds a RIP inside park_site, then lets the load run again.
// Launched, it makes N calls (200) and ends. With --attached it takes commands on stdin:
// "go N" (N calls, then "done"), "stop" (the end line, exit).
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <string>

#include "target_common.hpp"

#define FUNC(name) ".globl " #name "\n.type " #name ", @function\n" #name ":\n"
#define END(name) ".size " #name ", .-" #name "\n"
#define LABEL(name) ".globl " #name "\n" #name ":\n"

// Each site's fault is its second instruction; a jump at +0 displaces it, and the instruction
// the handler continues at may be displaced too (segv, fpe) or be the end of the patch (ill, bus).
asm(".text\n" FUNC(segv_site) "  mov %esi, %eax\n" LABEL(segv_fault) "  mov (%rdi), %eax\n" LABEL(
    segv_cont) "  add $0, %eax\n  mov %eax, %ecx\n  mov %ecx, %eax\n  ret\n" END(segv_site)
    /* fpe_site(a, b): a / b + 1, or -1 when b is 0 */
    FUNC(fpe_site) "  mov %rdi, %rax\n  xor %edx, %edx\n" LABEL(fpe_fault) "  div %rsi\n" LABEL(
        fpe_cont) "  add $1, %rax\n  nop\n  ret\n" END(fpe_site)
    /* ill_site(x): x + 10, the ud2 skipped */
    FUNC(ill_site) "  lea 3(%rdi), %rax\n" LABEL(ill_fault) "  ud2\n" LABEL(
        ill_cont) "  add $7, %rax\n  ret\n" END(ill_site)
    /* bus_site(p): *p + 2, or 0xbb + 2 past the end of the file */
    FUNC(bus_site) "  mov %rdi, %rcx\n" LABEL(bus_fault) "  movzbl (%rcx), %eax\n" LABEL(
        bus_cont) "  add $2, %eax\n  ret\n" END(bus_site)
    /* park_site(p): *p + 3, p's page readable again by the handler */
    FUNC(park_site) "  mov %esi, %eax\n" LABEL(park_fault) "  mov (%rdi), %edx\n  lea 2(%rax), "
                    "%rcx\n  lea 1(%rdx,%rcx), %eax\n  ret\n" END(park_site));

extern "C" {
int segv_site(const int* p, int err);
long fpe_site(long a, long b);
long ill_site(long x);
int bus_site(const char* p);
int park_site(const int* p, int one);
extern char segv_fault[], segv_cont[], fpe_fault[], fpe_cont[], ill_fault[], ill_cont[],
    bus_fault[], bus_cont[], park_fault[];
}

namespace {

char* g_none;  // an unmapped page: loads from it fault
char* g_file;  // two pages of a one-page file: the second is past its end
char* g_park;
bool g_parked = false;

greg_t& reg(void* ctx, int r) {
  return static_cast<ucontext_t*>(ctx)->uc_mcontext.gregs[r];
}

void bad() {
  fault::g_bad.fetch_add(1);
}

// RIP must be the original instruction's, and si_addr what the original gives.
void expect(void* ctx, const char* fault, const void* addr, const void* want_addr) {
  if (reinterpret_cast<char*>(reg(ctx, REG_RIP)) != fault || addr != want_addr) bad();
}

void on_segv(int, siginfo_t* si, void* ctx) {
  if (reinterpret_cast<char*>(reg(ctx, REG_RIP)) == park_fault && !g_parked) {
    g_parked = true;
    fault::say("ready " + std::to_string(::getpid()));
    std::string line;
    while (std::getline(std::cin, line) && line != "release") {
    }
    ::mprotect(g_park, 4096, PROT_READ);
    return;  // the load runs again
  }
  expect(ctx, segv_fault, si->si_addr, reinterpret_cast<void*>(reg(ctx, REG_RDI)));
  reg(ctx, REG_RIP) = reinterpret_cast<greg_t>(segv_cont);
}

void on_fpe(int, siginfo_t* si, void* ctx) {
  expect(ctx, fpe_fault, si->si_addr, fpe_fault);
  reg(ctx, REG_RAX) = -2;
  reg(ctx, REG_RIP) = reinterpret_cast<greg_t>(fpe_cont);
}

void on_ill(int, siginfo_t* si, void* ctx) {
  expect(ctx, ill_fault, si->si_addr, ill_fault);
  reg(ctx, REG_RIP) = reinterpret_cast<greg_t>(ill_cont);
}

void on_bus(int, siginfo_t* si, void* ctx) {
  expect(ctx, bus_fault, si->si_addr, reinterpret_cast<void*>(reg(ctx, REG_RCX)));
  reg(ctx, REG_RAX) = 0xbb;
  reg(ctx, REG_RIP) = reinterpret_cast<greg_t>(bus_cont);
}

void handle(int sig, void (*fn)(int, siginfo_t*, void*)) {
  struct sigaction sa = {};
  sa.sa_sigaction = fn;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigaction(sig, &sa, nullptr);
}

void setup() {
  handle(SIGSEGV, on_segv);
  handle(SIGFPE, on_fpe);
  handle(SIGILL, on_ill);
  handle(SIGBUS, on_bus);
  g_none = static_cast<char*>(::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  int fd = ::memfd_create("fault-handler-bus", 0);
  if (fd < 0 || ::ftruncate(fd, 4096) != 0) std::exit(3);
  g_file = static_cast<char*>(::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ::close(fd);
  std::memset(g_file, 0x11, 4096);
  g_park = static_cast<char*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  *reinterpret_cast<int*>(g_park) = 40;
  ::mprotect(g_park, 4096, PROT_NONE);
}

// One call of the kind's site, faulting when `fault`; its result checked.
void call(const std::string& kind, bool fault, int i) {
  static int good = 77;
  if (kind == "segv") {
    if (segv_site(fault ? reinterpret_cast<int*>(g_none) : &good, -7) != (fault ? -7 : 77)) bad();
  } else if (kind == "fpe") {
    if (fpe_site(1000 + i, fault ? 0 : 10) != (fault ? -1 : (1000 + i) / 10 + 1)) bad();
  } else if (kind == "ill") {
    if (ill_site(i) != i + 10) bad();
  } else if (kind == "bus") {
    if (bus_site(g_file + (fault ? 4096 : 0) + i % 64) != (fault ? 0xbb : 0x11) + 2) bad();
  } else if (park_site(reinterpret_cast<int*>(g_park), 1) != 44) {
    bad();
  }
}

void calls(const std::string& kind, int n) {
  for (int i = 0; i < n; ++i) {
    call(kind, i % 2 == 1, i);
    fault::g_calls.fetch_add(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  fault::init(argc, argv);
  std::string kind = fault::option(argc, argv, "--kind", "segv");
  setup();
  if (kind == "park") {
    call(kind, true, 0);  // says "ready" from its handler, parked until "release"
  } else {
    fault::say("ready " + std::to_string(::getpid()));
  }
  if (!fault::flag(argc, argv, "--attached")) {
    int n = std::stoi(fault::option(argc, argv, "--calls", "200"));
    calls(kind, n);
    fault::say_end("site_calls=" + std::to_string(n));
    return 0;
  }
  for (std::string line; std::getline(std::cin, line) && line != "stop";) {
    if (line.rfind("go ", 0) != 0) continue;
    calls(kind, std::stoi(line.substr(3)));
    fault::say("done");
  }
  fault::say_end();
  return 0;
}
