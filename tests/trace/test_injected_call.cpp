// An IFUNC resolver probecost calls in the process (tracer/core/remote_calls_function.cpp) must
// leave the thread it borrows as it was.
//
// Its way back (tracer/core/way_back.hpp) writes a frame of ~3 KB some 4 KB
// below the thread's stack pointer. A thread parked on a small stack of the program's own (a
// makecontext coroutine, 8 KiB, 4000 bytes of it used) has no room there: the frame went into
// the program's heap data under the stack (and stayed), or, with a guard page under the stack,
// into the guard page through /proc/PID/mem (FOLL_FORCE), where the IFUNC resolver's `ret`
// faulted, and probecost resumed the fault forever. Either way the program must run on
// unharmed: its data as it was, its read() returning what was written.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "run_capture.hpp"
#include "trace_harness.hpp"

namespace {

void expect_unharmed_by_an_ifunc_call(const char* mode) {
  int in[2], out[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  pid_t pid = probecost::test::spawn({SMALL_STACK, mode, "8192", "4000"}, in[0], out[1], -1);
  ::close(in[0]);
  ::close(out[1]);
  FILE* from = ::fdopen(out[0], "r");
  ASSERT_EQ(probecost::test::read_line(from), "ready");
  {
    // wcsrchr: no relocated slot resolves it, so its resolver is called in the process.
    probecost::test::Trace trace({"-p", std::to_string(pid), "-b", "libc.so.6:wcsrchr"});
    ASSERT_TRUE(trace.ready) << trace.stderr_text;
    EXPECT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  }
  ASSERT_EQ(::write(in[1], "x\n", 2), 2);
  EXPECT_EQ(probecost::test::read_line(from), "changed=0 read=1") << mode;
  ::close(in[1]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  std::fclose(from);
}

TEST(InjectedCall, AThreadOnASmallHeapStackKeepsTheDataUnderIt) {
  expect_unharmed_by_an_ifunc_call("heap");
}

TEST(InjectedCall, AThreadOnAStackAboveAGuardPageRunsOn) {
  expect_unharmed_by_an_ifunc_call("guard");
}

// xmm_spin, spawned with a pipe each way, told to check its vector registers once traced.
struct XmmSpin {
  int in[2], out[2];
  pid_t pid = -1;
  FILE* from = nullptr;

  void start() {
    ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid = probecost::test::spawn({XMM_SPIN}, in[0], out[1], -1);
    ::close(in[0]);
    ::close(out[1]);
    from = ::fdopen(out[0], "r");
    ASSERT_EQ(probecost::test::read_line(from), "ready");
  }
  // Its registers as they were, and its exit as untraced.
  void expect_intact_to_the_end() {
    ASSERT_EQ(::write(in[1], "x\n", 2), 2);
    EXPECT_EQ(probecost::test::read_line(from), "xmm intact");
    ::close(in[1]);
    int st = 0;
    ::waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
    std::fclose(from);
  }
};

// The resolver may clobber any vector register (the ABI lets it); the thread, stopped anywhere
// in its code, may have live values there: they came back changed (set_regs gives back the
// general registers alone).
TEST(InjectedCall, AResolverLeavesTheThreadsVectorRegistersAlone) {
  XmmSpin spin;
  ASSERT_NO_FATAL_FAILURE(spin.start());
  {
    probecost::test::Trace trace({"-p", std::to_string(spin.pid), "-b", "xmm_spin_ifunc"});
    ASSERT_TRUE(trace.ready) << trace.stderr_text;
    EXPECT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  }
  spin.expect_intact_to_the_end();
}

// A resolver that never returns and makes no system call (xmm_spin_stuck's spins): the call,
// resumed with its way back, had no bound, and probecost waited on it forever. Now it is
// interrupted after its deadline: probecost says which function and thread, and ends; the
// thread, given its registers (vector ones too) back, runs on as if untraced. The spin is
// forever, so nothing here depends on timing but the test's own timeout.
TEST(InjectedCall, AResolverThatNeverReturnsIsGivenUpOnAndTheThreadRunsOn) {
  XmmSpin spin;
  ASSERT_NO_FATAL_FAILURE(spin.start());
  {
    probecost::test::Trace trace({"-p", std::to_string(spin.pid), "-b", "xmm_spin_stuck"});
    EXPECT_FALSE(trace.ready) << trace.stderr_text;
    EXPECT_NE(trace.finish(0), 0) << trace.stderr_text;
    EXPECT_NE(trace.stderr_text.find("did not return within"), std::string::npos)
        << trace.stderr_text;
  }
  spin.expect_intact_to_the_end();
}

}  // namespace
