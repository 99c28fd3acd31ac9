// Issue 23 §1c: an injected call borrows a thread stopped inside a restartable sequence of the
// program's. Resumed at the vDSO's syscall, outside the sequence, the thread had its rseq_cs
// cleared by the kernel, and given back its registers it went on inside the sequence with the
// abort it was owed lost. rseq_spin's only thread is inside its sequence nearly all the time,
// and says how many of its rounds found rseq_cs cleared inside the sequence ("lost").
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "run_capture.hpp"
#include "trace_harness.hpp"

namespace {

TEST(RseqInject, AThreadInsideASequenceKeepsItsAbort) {
  int in[2], out[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  pid_t pid = probecost::test::spawn({RSEQ_SPIN}, in[0], out[1], -1);
  ::close(in[0]);
  ::close(out[1]);
  FILE* from = ::fdopen(out[0], "r");
  ASSERT_EQ(probecost::test::read_line(from), "ready");
  // Each attach and detach injects system calls (the trap area, its SIGTRAP disposition, the
  // jump areas): into the one thread there is, inside its sequence.
  for (const char* via : {"int3", "jump", "int3", "jump"}) {
    probecost::test::Trace trace({"-p", std::to_string(pid), "--via", via, "-b", "probe_fn"});
    ASSERT_TRUE(trace.ready) << trace.stderr_text;
    EXPECT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  }
  ASSERT_EQ(::write(in[1], "stop\n", 5), 5);
  std::string end = probecost::test::read_line(from);
  long lost = -1, aborts = -1, completed = -1;
  ASSERT_EQ(
      std::sscanf(end.c_str(), "lost=%ld aborts=%ld completed=%ld", &lost, &aborts, &completed), 3)
      << end;
  EXPECT_EQ(lost, 0) << end;
  EXPECT_GT(completed, 0) << end;
  ::close(in[1]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  std::fclose(from);
}

}  // namespace
