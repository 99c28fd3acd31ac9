// Reading a stopped tracee's seccomp state with PTRACE_SECCOMP_GET_FILTER: a child that loaded
// a filter (read back instruction by instruction), and one in strict mode. Label ptrace.
#include <gtest/gtest.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "tracer/os/seccomp.hpp"

namespace probecost::seccomp {
namespace {

Program exported(scmp_filter_ctx ctx) {
  int fd = memfd_create("bpf", MFD_CLOEXEC);
  seccomp_export_bpf(ctx, fd);
  off_t size = lseek(fd, 0, SEEK_END);
  Program p(static_cast<std::size_t>(size) / sizeof(sock_filter));
  EXPECT_EQ(pread(fd, p.data(), static_cast<std::size_t>(size), 0), size);
  close(fd);
  return p;
}

// A child, seized and stopped by PTRACE_INTERRUPT once `setup` has run: it says so on a pipe
// (write is allowed even in strict mode) and then waits on another.
struct StoppedChild {
  template <typename Setup>
  explicit StoppedChild(Setup setup) {
    int ready[2], wait[2];
    if (pipe(ready) != 0 || pipe(wait) != 0) return;
    pid = fork();
    if (pid == 0) {
      close(wait[1]);
      setup();
      char c = 1;
      if (write(ready[1], &c, 1) != 1) syscall(SYS_exit, 1);
      while (read(wait[0], &c, 1) != 0) {
      }
      syscall(SYS_exit, 0);
    }
    close(ready[1]);
    close(wait[0]);
    hold = wait[1];
    char c;
    bool set_up = read(ready[0], &c, 1) == 1;
    close(ready[0]);
    if (!set_up || ptrace(PTRACE_SEIZE, pid, nullptr, nullptr) != 0) return;
    ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr);
    int status = 0;
    stopped = waitpid(pid, &status, __WALL) == pid && WIFSTOPPED(status);
  }
  ~StoppedChild() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, __WALL);
    }
    if (hold >= 0) close(hold);
  }
  pid_t pid = -1;
  int hold = -1;
  bool stopped = false;
};

TEST(SeccompRead, AFilterReadsBackAsLoaded) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(memfd_create), 0);
  Program loaded = exported(ctx);
  StoppedChild child([&] {
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    seccomp_load(ctx);
  });
  seccomp_release(ctx);
  ASSERT_TRUE(child.stopped);
  auto t = ThreadFilters::of(child.pid);
  if (!t.unreadable().empty()) GTEST_SKIP() << t.unreadable();  // no CAP_SYS_ADMIN here
  EXPECT_EQ(t.mode(), ThreadFilters::Mode::Filter);
  ASSERT_EQ(t.count(), 1u);
  const long none[6] = {};
  EXPECT_EQ(t.fate(x86_64_call(SYS_memfd_create, none, 0)).kind, ThreadFilters::Fate::Kind::Harms);
  EXPECT_EQ(t.fate(x86_64_call(SYS_mmap, none, 0)).kind, ThreadFilters::Fate::Kind::Runs);
}

TEST(SeccompRead, StrictModeAllowsOnlyFourCalls) {
  StoppedChild child([] { prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT); });
  ASSERT_TRUE(child.stopped);
  auto t = ThreadFilters::of(child.pid);
  EXPECT_EQ(t.mode(), ThreadFilters::Mode::Strict);
  const long none[6] = {};
  EXPECT_EQ(t.fate(x86_64_call(SYS_write, none, 0)).kind, ThreadFilters::Fate::Kind::Runs);
  auto mmap = t.fate(x86_64_call(SYS_mmap, none, 0));
  EXPECT_EQ(mmap.kind, ThreadFilters::Fate::Kind::Harms);
  EXPECT_EQ(mmap.why, "seccomp strict mode would kill it for mmap");
}

TEST(SeccompRead, NoSeccompAllowsEverything) {
  StoppedChild child([] {});
  ASSERT_TRUE(child.stopped);
  auto t = ThreadFilters::of(child.pid);
  EXPECT_EQ(t.mode(), ThreadFilters::Mode::Disabled);
}

}  // namespace
}  // namespace probecost::seccomp
