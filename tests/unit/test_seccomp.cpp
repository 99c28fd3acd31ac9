// The seccomp evaluator against filters built by libseccomp and by hand, and against the
// kernel itself: a filter loaded in a thread of this test answers with errno values, and the
// evaluator must predict every one. No ptrace, no child process.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "common/error.hpp"
#include "tracer/os/seccomp.hpp"

namespace probecost::seccomp {
namespace {

// libseccomp's BPF for `ctx`, read back from a memfd.
Program exported(scmp_filter_ctx ctx) {
  int fd = memfd_create("bpf", MFD_CLOEXEC);
  EXPECT_EQ(seccomp_export_bpf(ctx, fd), 0);
  off_t size = lseek(fd, 0, SEEK_END);
  Program p(static_cast<std::size_t>(size) / sizeof(sock_filter));
  EXPECT_EQ(pread(fd, p.data(), static_cast<std::size_t>(size), 0), size);
  close(fd);
  return p;
}

// A MemoryDenyWriteExecute-like filter: mmap/mprotect with PROT_EXEC -> `exec_action`,
// memfd_create -> `memfd_action`, everything else allowed.
Program deny_exec(std::uint32_t exec_action, std::uint32_t memfd_action) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  seccomp_rule_add(ctx, exec_action, SCMP_SYS(mmap), 1,
                   SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
  seccomp_rule_add(ctx, exec_action, SCMP_SYS(mprotect), 1,
                   SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
  seccomp_rule_add(ctx, memfd_action, SCMP_SYS(memfd_create), 0);
  Program p = exported(ctx);
  seccomp_release(ctx);
  return p;
}

CallData mmap_call(long prot) {
  const long args[] = {0, 4096, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0};
  return x86_64_call(SYS_mmap, args, 0x401000);
}

TEST(Seccomp, LibseccompFilterKillsOnExecMappingsOnly) {
  Program p = deny_exec(SCMP_ACT_KILL_PROCESS, SCMP_ACT_TRAP);
  const Program filters[] = {p};
  EXPECT_EQ(evaluate(filters, mmap_call(PROT_READ | PROT_EXEC)).action, Action::KillProcess);
  EXPECT_EQ(evaluate(filters, mmap_call(PROT_READ | PROT_WRITE)).action, Action::Allow);
  const long none[6] = {};
  EXPECT_EQ(evaluate(filters, x86_64_call(SYS_memfd_create, none, 0)).action, Action::Trap);
  EXPECT_EQ(evaluate(filters, x86_64_call(SYS_getpid, none, 0)).action, Action::Allow);
  // Another architecture's call (x32 or i386 numbers under another AUDIT_ARCH): libseccomp's
  // filter kills what is not its architecture.
  CallData i386 = mmap_call(PROT_READ);
  i386.arch = AUDIT_ARCH_I386;
  EXPECT_EQ(evaluate(filters, i386).action, Action::KillThread);
}

TEST(Seccomp, ErrnoCarriesItsValue) {
  Program p = deny_exec(SCMP_ACT_ERRNO(EPERM), SCMP_ACT_ERRNO(ENOSYS));
  const Program filters[] = {p};
  Verdict v = evaluate(filters, mmap_call(PROT_EXEC));
  EXPECT_EQ(v.action, Action::Errno);
  EXPECT_EQ(v.data, EPERM);
  EXPECT_FALSE(v.runs());
  EXPECT_EQ(v.describe(), "SECCOMP_RET_ERRNO (EPERM: Operation not permitted)");
  const long none[6] = {};
  EXPECT_EQ(evaluate(filters, x86_64_call(SYS_memfd_create, none, 0)).data, ENOSYS);
}

TEST(Seccomp, TheMostRestrictiveActionOfTheStackWins) {
  Program errno_all = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES)};
  Program log_all = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_LOG)};
  Program errno_other = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)};
  Program kill = deny_exec(SCMP_ACT_KILL_PROCESS, SCMP_ACT_ALLOW);
  Program kill_thread = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_THREAD)};
  Program unknown = {BPF_STMT(BPF_RET | BPF_K, 0x00010000u)};  // no such action
  Program trap = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP)};
  {
    const Program stack[] = {log_all, errno_all, kill};
    EXPECT_EQ(evaluate(stack, mmap_call(PROT_EXEC)).action, Action::KillProcess);
    EXPECT_EQ(evaluate(stack, mmap_call(PROT_READ)).action, Action::Errno);
  }
  {
    // Equal actions: the newest filter's (index 0) data stays.
    const Program stack[] = {errno_all, errno_other};
    EXPECT_EQ(evaluate(stack, mmap_call(0)).data, EACCES);
  }
  {
    // An action the kernel does not know ranks by its value (between KILL_THREAD and TRAP
    // here) and kills.
    const Program stack[] = {trap, unknown};
    EXPECT_EQ(evaluate(stack, mmap_call(0)).action, Action::KillProcess);
    const Program stack2[] = {unknown, kill_thread};
    EXPECT_EQ(evaluate(stack2, mmap_call(0)).action, Action::KillThread);
  }
  const Program none[] = {log_all};
  EXPECT_TRUE(evaluate(none, mmap_call(0)).runs());
}

TEST(Seccomp, ArithmeticScratchMemoryAndJumps) {
  // A = nr; A = ((A + 3) * 2 - 1) ^ 0xff; M[3] = A; X = 5; A = M[3] >> 1; A |= X;
  // jset 0x4 -> errno(A & 0xfff) else kill
  Program p = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
      BPF_STMT(BPF_ALU | BPF_ADD | BPF_K, 3),
      BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, 2),
      BPF_STMT(BPF_ALU | BPF_SUB | BPF_K, 1),
      BPF_STMT(BPF_ALU | BPF_XOR | BPF_K, 0xff),
      BPF_STMT(BPF_ST, 3),
      BPF_STMT(BPF_LDX | BPF_IMM, 5),
      BPF_STMT(BPF_LD | BPF_MEM, 3),
      BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 1),
      BPF_STMT(BPF_ALU | BPF_OR | BPF_X, 0),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x4, 0, 3),
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xfff),
      BPF_STMT(BPF_ALU | BPF_OR | BPF_K, SECCOMP_RET_ERRNO),
      BPF_STMT(BPF_RET | BPF_A, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
  };
  const long none[6] = {};
  std::uint32_t a = ((((10u + 3) * 2 - 1) ^ 0xff) >> 1) | 5;
  ASSERT_TRUE(a & 4);
  EXPECT_EQ(run(p, x86_64_call(10, none, 0)), SECCOMP_RET_ERRNO | (a & 0xfff));
}

TEST(Seccomp, DivisionByAZeroXReturnsZero) {
  Program p = {
      BPF_STMT(BPF_LD | BPF_IMM, 7),
      BPF_STMT(BPF_LDX | BPF_IMM, 0),  // X = 0
      BPF_STMT(BPF_ALU | BPF_DIV | BPF_X, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  const long none[6] = {};
  EXPECT_EQ(run(p, x86_64_call(0, none, 0)), 0u);  // SECCOMP_RET_KILL_THREAD
  const Program stack[] = {p};
  EXPECT_EQ(evaluate(stack, x86_64_call(0, none, 0)).action, Action::KillThread);
}

TEST(Seccomp, ProgramsTheKernelRefusesAreErrors) {
  const long none[6] = {};
  CallData c = x86_64_call(0, none, 0);
  EXPECT_THROW(run({BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 64), BPF_STMT(BPF_RET | BPF_A, 0)}, c),
               Error);  // past seccomp_data
  EXPECT_THROW(run({BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 2), BPF_STMT(BPF_RET | BPF_A, 0)}, c),
               Error);  // unaligned
  EXPECT_THROW(run({BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 0), BPF_STMT(BPF_RET | BPF_A, 0)}, c),
               Error);  // a half-word load
  EXPECT_THROW(run({BPF_JUMP(BPF_JMP | BPF_JA, 5, 0, 0), BPF_STMT(BPF_RET | BPF_A, 0)}, c),
               Error);                                           // out of the program
  EXPECT_THROW(run({BPF_STMT(BPF_LD | BPF_IMM, 0)}, c), Error);  // no return
  EXPECT_THROW(run({BPF_STMT(BPF_LD | BPF_MEM, 16), BPF_STMT(BPF_RET | BPF_A, 0)}, c), Error);
  EXPECT_THROW(run({}, c), Error);
}

TEST(Seccomp, FateSaysWhatAndWhy) {
  using Kind = ThreadFilters::Fate::Kind;
  auto t = ThreadFilters::with({deny_exec(SCMP_ACT_KILL_PROCESS, SCMP_ACT_ERRNO(ENOSYS))});
  EXPECT_EQ(t.fate(mmap_call(PROT_READ)).kind, Kind::Runs);
  auto killed = t.fate(mmap_call(PROT_READ | PROT_EXEC));
  EXPECT_EQ(killed.kind, Kind::Harms);
  EXPECT_EQ(killed.why,
            "its seccomp filter answers mmap with SECCOMP_RET_KILL_PROCESS (it would die of "
            "SIGSYS)");
  const long none[6] = {};
  auto enosys = t.fate(x86_64_call(SYS_memfd_create, none, 0));
  EXPECT_EQ(enosys.kind, Kind::Answers);
  EXPECT_EQ(enosys.result, -ENOSYS);
  EXPECT_EQ(enosys.why,
            "its seccomp filter answers memfd_create with SECCOMP_RET_ERRNO (ENOSYS: Function not "
            "implemented)");
  EXPECT_EQ(ThreadFilters{}.fate(mmap_call(PROT_EXEC)).kind, Kind::Runs);
  // A faked success (errno 0) and a trap are never injected; RET_TRACE fails with ENOSYS.
  Program fake = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 0)};
  Program trap = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP)};
  Program trace = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE)};
  Program notify = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF)};
  EXPECT_EQ(ThreadFilters::with({fake}).fate(mmap_call(0)).kind, Kind::Harms);
  EXPECT_EQ(ThreadFilters::with({trap}).fate(mmap_call(0)).kind, Kind::Harms);
  EXPECT_EQ(ThreadFilters::with({notify}).fate(mmap_call(0)).kind, Kind::Harms);
  auto traced = ThreadFilters::with({trace}).fate(mmap_call(0));
  EXPECT_EQ(traced.kind, Kind::Answers);
  EXPECT_EQ(traced.result, -ENOSYS);
}

// Loads `p` in a new thread (filters are per thread), runs `body` there, returns its result.
template <typename Body>
auto in_filtered_thread(const Program& p, Body body) {
  decltype(body()) result{};
  std::thread t([&] {
    // Without CAP_SYS_ADMIN the kernel wants no_new_privs (this thread's only).
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    sock_fprog prog{static_cast<unsigned short>(p.size()), const_cast<sock_filter*>(p.data())};
    ASSERT_EQ(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog), 0) << strerror(errno);
    result = body();
  });
  t.join();
  return result;
}

// The kernel's answer to mmap(prot): 0 if it ran, else the errno.
int kernel_mmap_errno(long prot) {
  void* m = mmap(nullptr, 4096, static_cast<int>(prot), MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return errno;
  munmap(m, 4096);
  return 0;
}

TEST(Seccomp, PredictsTheKernelsAnswers) {
  Program p = deny_exec(SCMP_ACT_ERRNO(EPERM), SCMP_ACT_ERRNO(ENOSYS));
  const Program stack[] = {p};
  for (long prot : {PROT_NONE, PROT_READ, PROT_READ | PROT_WRITE, PROT_EXEC, PROT_READ | PROT_EXEC,
                    PROT_READ | PROT_WRITE | PROT_EXEC}) {
    int kernel = in_filtered_thread(p, [&] { return kernel_mmap_errno(prot); });
    Verdict v = evaluate(stack, mmap_call(prot));
    EXPECT_EQ(v.runs() ? 0 : v.data, kernel) << "prot " << prot;
  }
}

// A filter that answers getppid with errno = the low 12 bits of the instruction pointer it
// sees: where the kernel says the call was made from.
Program ip_filter() {
  return {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(CallData, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 0, 4),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(CallData, instruction_pointer)),
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xfff),
      BPF_STMT(BPF_ALU | BPF_OR | BPF_K, SECCOMP_RET_ERRNO),
      BPF_STMT(BPF_RET | BPF_A, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
}

TEST(Seccomp, TheInstructionPointerIsTheAddressAfterTheSyscall) {
  struct Seen {
    long result;
    std::uint64_t syscall_at;
  };
  Seen seen = in_filtered_thread(ip_filter(), [] {
    Seen s{};
    long rax = SYS_getppid;
    asm volatile("lea 1f(%%rip), %1\n\t1: syscall"
                 : "+a"(rax), "=&r"(s.syscall_at)
                 :
                 : "rcx", "r11", "memory");
    s.result = rax;
    return s;
  });
  const Program stack[] = {ip_filter()};
  const long none[6] = {};
  Verdict v = evaluate(stack, x86_64_call(SYS_getppid, none, seen.syscall_at));
  EXPECT_EQ(-seen.result, static_cast<long>((seen.syscall_at + 2) & 0xfff));
  EXPECT_EQ(v.data, (seen.syscall_at + 2) & 0xfff);
}

}  // namespace
}  // namespace probecost::seccomp
