// A tracee written to be awkward for jump probes (issue 15): code whose shape, not timing, is
// the trouble. Commands come from argv (run in order, then exit) or, given no command (or only
// a thread count, as trace_harness's Target passes), line by line on stdin after "ready PID".
// Each answers one line, the same traced or not:
//   overlap N     awkward_overlap(i), i < N: straight-line code whose first two instructions
//                 take 7 bytes (+0 and +3 are boundaries)             -> "overlap=SUM"
//   mix N         awkward_mix(i), i < N: compiled code with a loop       -> "mix=XOR"
//   flags N       N rounds of awkward_read_flags under each of the 64 combinations of the six
//                 status flags: a routine that returns its caller's flags -> "flags=RIGHT/ALL"
//   catch N       awkward_catch(i), i < N, built -O0: every third throws -> "catch=SUM caught=C"
//   park          a thread spins in awkward_park(0) until a SIGUSR1 handler, entered while
//                 the thread was inside awkward_park's first 6 bytes, blocks on a pipe
//                                                                         -> "parked"
//   release       the handler returns and lets the loop end              -> "released rc=1"
//   park_calls N  awkward_park(1) N times (passes straight through)      -> "park_calls=N"
//   park_foreign  as park, but the handler's frame returns into an anonymous executable page
//                 whose code jumps to awkward_park+2 (as a copy a previous probecost left
//                 would): "release" then goes through it                  -> "parked"
//   park_split    as park, but the handler runs on a 64 KiB sigaltstack split in two mappings
//                 (MADV_DONTDUMP on its upper half), its locals taking RSP into the lower one,
//                 below the mapping that holds its frame                  -> "parked"
//   spin          a thread calls awkward_push (push %rbx, first) until "stop"  -> "spinning"
//   signal_in_copy  SIGUSR2 to the spinning thread until one finds it outside the executable's
//                 text (in a tracer's out-of-line copy); its handler then blocks on a pipe
//                                                                  -> "in copy" (or "never")
//   release_spin  the handler returns; answers once the thread made 1000 more calls -> "ran on"
//   stop          the spinning thread ends                 -> "spins=N pushes=N" (equal: right)
//   seal          a seccomp filter: mmap, mprotect and pkey_mprotect with PROT_EXEC fail with
//                 EPERM, in every thread (MemoryDenyWriteExecute-style)  -> "sealed EPERM"
//   mdwe          the kernel's own: prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN) (Linux 6.3+):
//                 no mapping writable and executable, none made executable later
//                                                  -> "mdwe EACCES" (or "mdwe unsupported")
//   block_trap    a SIGTRAP handler of its own, and SIGTRAP blocked in the thread that runs
//                 the commands                                          -> "trap blocked"
//   trap_check    is SIGTRAP still blocked, and the handler still its own? Then unblocks and
//                 raises SIGTRAP (its handler must run, not the default)
//                                              -> "blocked=B own=O handled=H" (1 1 1: right)
//   exit                                                                 -> "bye"
#include <alloca.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern "C" std::uint64_t awkward_overlap(std::uint64_t);
extern "C" std::uint64_t awkward_read_flags();
extern "C" std::uint64_t awkward_call_with_flags(std::uint64_t flags);
extern "C" std::uint64_t awkward_park(std::uint64_t go);
extern "C" void awkward_push();
extern "C" {
std::uint64_t g_awkward_pushes = 0;
}
extern "C" char __executable_start, etext;
extern "C" int awkward_catch(int i);
extern std::uint64_t g_awkward_caught;

asm(R"(
  .text
  .globl awkward_overlap
  .type awkward_overlap, @function
awkward_overlap:
  mov %rdi, %rax          # +0, 3 bytes
  add $1, %rax            # +3, 4 bytes: a jump at +0 covers it
  xor %edx, %edx          # +7
  imul $3, %rax, %rax     # +9
  ret                     # +13
  .size awkward_overlap, .-awkward_overlap

  .globl awkward_read_flags
  .type awkward_read_flags, @function
awkward_read_flags:
  pushfq                  # the caller's flags, at the entry
  pop %rax
  and $0x8d5, %eax        # CF PF AF ZF SF OF
  ret
  .size awkward_read_flags, .-awkward_read_flags

  .globl awkward_call_with_flags
  .type awkward_call_with_flags, @function
awkward_call_with_flags:
  push %rdi
  popfq
  call awkward_read_flags
  ret
  .size awkward_call_with_flags, .-awkward_call_with_flags

  .globl awkward_push
  .type awkward_push, @function
awkward_push:
  push %rbx               # 1 byte: an int3 probe's out-of-line copy holds it alone
  lock addq $1, g_awkward_pushes(%rip)
  pop %rbx
  ret
  .size awkward_push, .-awkward_push

  .globl awkward_park
  .type awkward_park, @function
awkward_park:
  mov %edi, %ecx          # +0
1:
  test %ecx, %ecx         # +2: a spinning thread is at +2 or +4, inside a jump at +0
  jz 1b                   # +4
  mov %ecx, %eax          # +6
  ret
  .size awkward_park, .-awkward_park
)");

// Compiled code with a loop and several blocks.
extern "C" __attribute__((noipa)) std::uint64_t awkward_mix(std::uint64_t x) {
  std::uint64_t h = x * 0x9E3779B97F4A7C15ull;
  for (std::uint64_t i = 0; i < (x & 3); ++i) h = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ull + i;
  return h ^ (h >> 32);
}

namespace {

int g_parked[2], g_release[2];

bool inside_park(std::uint64_t rip) {
  auto start = reinterpret_cast<std::uint64_t>(&awkward_park);
  return rip > start && rip < start + 6;
}

// Says whether the thread was interrupted inside awkward_park's loop; if so, waits for
// "release" and then makes the loop end (ecx = 1) when the handler returns into it.
std::uint64_t g_foreign = 0;  // park_foreign's page: jmp *0(%rip) to awkward_park+2

void* g_split_stack = nullptr;  // park_split's sigaltstack
constexpr std::size_t kSplitStack = 64 * 1024, kSplitLocals = 40 * 1024;

void on_park_signal(int, siginfo_t*, void* context) {
  auto* uc = static_cast<ucontext_t*>(context);
  char c = inside_park(static_cast<std::uint64_t>(uc->uc_mcontext.gregs[REG_RIP])) ? 'y' : 'n';
  if (c == 'y' && g_foreign) uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(g_foreign);
  if (::write(g_parked[1], &c, 1) != 1 || c == 'n') return;
  volatile char* locals = static_cast<char*>(alloca(g_split_stack ? kSplitLocals : 16));
  for (std::size_t i = 0; g_split_stack && i < kSplitLocals; i += 256) locals[i] = 1;
  while (::read(g_release[0], &c, 1) < 0 && errno == EINTR) {
  }
  uc->uc_mcontext.gregs[REG_RCX] = 1;
}

std::thread g_parked_thread;
std::uint64_t g_park_rc = 0;

std::string park() {
  if (::pipe(g_parked) != 0 || ::pipe(g_release) != 0) return "pipe failed";
  struct sigaction sa {};
  sa.sa_sigaction = on_park_signal;
  sa.sa_flags = SA_SIGINFO | (g_split_stack ? SA_ONSTACK : 0);
  ::sigaction(SIGUSR1, &sa, nullptr);
  g_parked_thread = std::thread([] {
    stack_t alt{g_split_stack, 0, kSplitStack};
    if (g_split_stack) ::sigaltstack(&alt, nullptr);
    g_park_rc = awkward_park(0);
  });
  // Signal it until a signal finds it inside the loop (the first ones may come before).
  for (char c = 'n'; c != 'y';) {
    pthread_kill(g_parked_thread.native_handle(), SIGUSR1);
    if (::read(g_parked[0], &c, 1) != 1) return "read failed";
  }
  return "parked";
}

std::string park_foreign() {
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return "mmap failed";
  auto* code = static_cast<unsigned char*>(page);
  const unsigned char jmp[] = {0xff, 0x25, 0, 0, 0, 0};  // jmp *0(%rip)
  std::memcpy(code, jmp, sizeof jmp);
  std::uint64_t target = reinterpret_cast<std::uint64_t>(&awkward_park) + 2;
  std::memcpy(code + sizeof jmp, &target, sizeof target);
  if (::mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) return "mprotect failed";
  g_foreign = reinterpret_cast<std::uint64_t>(page);
  return park();
}

std::string park_split() {
  g_split_stack =
      ::mmap(nullptr, kSplitStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g_split_stack == MAP_FAILED) return "mmap failed";
  auto* upper = static_cast<char*>(g_split_stack) + kSplitStack / 2;
  if (::madvise(upper, kSplitStack / 2, MADV_DONTDUMP) != 0) return "madvise failed";
  return park();
}

int g_in_copy[2], g_spin_release[2];
std::atomic<bool> g_stop_spin{false};
std::atomic<std::uint64_t> g_spins{0};
std::thread g_spinner;

void on_spin_signal(int, siginfo_t*, void* context) {
  auto rip =
      static_cast<std::uint64_t>(static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);
  bool text = rip >= reinterpret_cast<std::uint64_t>(&__executable_start) &&
              rip < reinterpret_cast<std::uint64_t>(&etext);
  char c = text ? 'n' : 'c';
  if (::write(g_in_copy[1], &c, 1) != 1 || c == 'n') return;
  while (::read(g_spin_release[0], &c, 1) < 0 && errno == EINTR) {
  }
}

std::string spin() {
  if (::pipe(g_in_copy) != 0 || ::pipe(g_spin_release) != 0) return "pipe failed";
  struct sigaction sa {};
  sa.sa_sigaction = on_spin_signal;
  sa.sa_flags = SA_SIGINFO;
  ::sigaction(SIGUSR2, &sa, nullptr);
  g_spinner = std::thread([] {
    while (!g_stop_spin.load(std::memory_order_relaxed)) {
      awkward_push();
      g_spins.fetch_add(1, std::memory_order_relaxed);
    }
  });
  // Once it is in the loop, its RIP is in the executable's text or a tracer's copy: never in
  // the C library's thread start any more.
  while (g_spins.load() == 0) sched_yield();
  return "spinning";
}

std::string signal_in_copy() {
  for (int tries = 0; tries < 100000; ++tries) {
    pthread_kill(g_spinner.native_handle(), SIGUSR2);
    char c = 0;
    if (::read(g_in_copy[0], &c, 1) != 1) return "read failed";
    if (c == 'c') return "in copy";
  }
  return "never";
}

std::string release_spin() {
  std::uint64_t from = g_spins.load();
  char c = 'x';
  if (::write(g_spin_release[1], &c, 1) != 1) return "write failed";
  while (g_spins.load() < from + 1000) sched_yield();
  return "ran on";
}

std::string stop_spin() {
  g_stop_spin = true;
  g_spinner.join();
  return "spins=" + std::to_string(g_spins.load()) +
         " pushes=" + std::to_string(__atomic_load_n(&g_awkward_pushes, __ATOMIC_RELAXED));
}

std::string release() {
  char c = 'x';
  if (::write(g_release[1], &c, 1) != 1) return "write failed";
  g_parked_thread.join();
  return "released rc=" + std::to_string(g_park_rc);
}

std::string seal() {
  constexpr std::uint32_t kArg2 = offsetof(struct seccomp_data, args) + 2 * sizeof(std::uint64_t);
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mprotect, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pkey_mprotect, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kArg2),  // prot (its low half)
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
    return std::string("seal failed: ") + std::strerror(errno);
  }
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED && errno == EPERM ? "sealed EPERM" : "seal did not hold";
}

std::string mdwe() {
  constexpr int kSetMdwe = 65, kRefuseExecGain = 1;  // PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
  if (::prctl(kSetMdwe, kRefuseExecGain, 0, 0, 0) != 0) return "mdwe unsupported";
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return ::mprotect(p, 4096, PROT_READ | PROT_EXEC) != 0 && errno == EACCES ? "mdwe EACCES"
                                                                            : "mdwe did not hold";
}

volatile sig_atomic_t g_trap_handled = 0;
void on_own_trap(int) {
  g_trap_handled = 1;
}

std::string block_trap() {
  struct sigaction sa = {};
  sa.sa_handler = on_own_trap;
  ::sigaction(SIGTRAP, &sa, nullptr);
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGTRAP);
  ::pthread_sigmask(SIG_BLOCK, &s, nullptr);
  return "trap blocked";
}

std::string trap_check() {
  sigset_t now, s;
  ::pthread_sigmask(SIG_BLOCK, nullptr, &now);
  struct sigaction sa = {};
  ::sigaction(SIGTRAP, nullptr, &sa);
  bool blocked = sigismember(&now, SIGTRAP) == 1, own = sa.sa_handler == on_own_trap;
  sigemptyset(&s);
  sigaddset(&s, SIGTRAP);
  ::pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
  if (own) ::raise(SIGTRAP);  // not with SIG_DFL: that would end the process
  return "blocked=" + std::to_string(blocked) + " own=" + std::to_string(own) +
         " handled=" + std::to_string(static_cast<int>(g_trap_handled));
}

std::string flags(std::uint64_t rounds) {
  constexpr std::uint64_t kBits[] = {0x1, 0x4, 0x10, 0x40, 0x80, 0x800};
  std::uint64_t right = 0;
  for (std::uint64_t r = 0; r < rounds; ++r) {
    for (unsigned n = 0; n < 64; ++n) {
      std::uint64_t want = 0;
      for (unsigned b = 0; b < 6; ++b) want |= (n >> b & 1) ? kBits[b] : 0;
      right += awkward_call_with_flags(want) == want;
    }
  }
  return "flags=" + std::to_string(right) + "/" + std::to_string(rounds * 64);
}

std::string run(const std::string& cmd, std::uint64_t n) {
  if (cmd == "overlap") {
    std::uint64_t sum = 0;
    for (std::uint64_t i = 0; i < n; ++i) sum += awkward_overlap(i);
    return "overlap=" + std::to_string(sum);
  }
  if (cmd == "mix") {
    std::uint64_t x = 0;
    for (std::uint64_t i = 0; i < n; ++i) x ^= awkward_mix(i);
    return "mix=" + std::to_string(x);
  }
  if (cmd == "flags") return flags(n);
  if (cmd == "catch") {
    long sum = 0;
    for (std::uint64_t i = 0; i < n; ++i) sum += awkward_catch(static_cast<int>(i));
    return "catch=" + std::to_string(sum) + " caught=" + std::to_string(g_awkward_caught);
  }
  if (cmd == "park") return park();
  if (cmd == "release") return release();
  if (cmd == "park_foreign") return park_foreign();
  if (cmd == "park_split") return park_split();
  if (cmd == "spin") return spin();
  if (cmd == "signal_in_copy") return signal_in_copy();
  if (cmd == "release_spin") return release_spin();
  if (cmd == "stop") return stop_spin();
  if (cmd == "park_calls") {
    std::uint64_t ok = 0;
    for (std::uint64_t i = 0; i < n; ++i) ok += awkward_park(1) == 1;
    return "park_calls=" + std::to_string(ok);
  }
  if (cmd == "seal") return seal();
  if (cmd == "mdwe") return mdwe();
  if (cmd == "block_trap") return block_trap();
  if (cmd == "trap_check") return trap_check();
  return "unknown command " + cmd;
}

void reply(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool interactive = argc < 2 || std::strspn(argv[1], "0123456789") == std::strlen(argv[1]);
  if (!interactive) {
    for (int i = 1; i < argc; ++i) {
      std::string cmd = argv[i];
      std::uint64_t n = i + 1 < argc && std::isdigit(argv[i + 1][0]) ? std::stoull(argv[++i]) : 0;
      reply(run(cmd, n));
    }
    return 0;
  }
  reply("ready " + std::to_string(::getpid()));
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string cmd;
    std::uint64_t n = 0;
    in >> cmd >> n;
    if (cmd == "exit") {
      reply("bye");
      return 0;
    }
    reply(run(cmd, n));
  }
  return 0;
}
