// The tracer against tiny real tracees (PIE and non-PIE): exact hit counts, signals passed on,
// output unchanged, original bytes back after detach, clear errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <array>

#include "common/error.hpp"
#include "run_capture.hpp"
#include "tracer/core/event_loop.hpp"
#include "tracer/symbols/ifunc.hpp"
#include "tracer/symbols/symbols.hpp"

using namespace probecost;
using probecost::test::MemFile;

namespace {

constexpr const char* kSite = "probecost_test_site";

std::vector<std::string> target_argv(const std::string& path, int iterations, int threads,
                                     std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {path, std::to_string(iterations), std::to_string(threads)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::string run_untraced(const std::vector<std::string>& argv) {
  auto r = probecost::test::run_command(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

struct TracedRun {
  std::string output;
  std::uint64_t hits = 0;
  std::uint64_t per_thread_sum = 0;
  std::optional<WaitStatus> end;
};

TracedRun run_traced(const std::vector<std::string>& argv) {
  MemFile out;
  LaunchSpec spec;
  spec.argv = argv;
  spec.stdout_fd = out.fd;
  auto family = Family::launch(spec);
  TracedProcess* proc = &family->root();
  Symbol site = ProcessSymbols(proc->pid()).resolve(kSite);
  proc->space().sites().add(site.address, site.name).enable();
  SingleStepOver step;
  Session session(*proc, step);
  EXPECT_EQ(run_session(*family, session), RunEnd::ProcessEnded);
  TracedRun r;
  r.hits =
      proc->space().sites().find(site.address) ? proc->space().sites().find(site.address)->hits : 0;
  r.end = proc->end();
  r.output = out.contents();
  return r;
}

class TracerTest : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(TracerTest, CountsEveryHitOneThread) {
  auto argv = target_argv(GetParam(), 5000, 1);
  TracedRun r = run_traced(argv);
  EXPECT_EQ(r.hits, 5000u);
  EXPECT_EQ(r.output, "calls=5000 signals=0\n");
  ASSERT_TRUE(r.end && r.end->exited());
  EXPECT_EQ(r.end->exit_code(), 0);
}

TEST_P(TracerTest, CountsEveryHitFourThreads) {
  // The classic step-over removes the int3 while one thread steps: every other thread must be
  // stopped meanwhile, or it runs through the site unseen and the count comes out short.
  auto argv = target_argv(GetParam(), 3000, 4);
  TracedRun r = run_traced(argv);
  EXPECT_EQ(r.hits, 12000u);
  EXPECT_EQ(r.output, "calls=12000 signals=0\n");
}

TEST_P(TracerTest, OutputIdenticalTracedAndUntraced) {
  auto argv = target_argv(GetParam(), 1000, 2, {"--signals", "3"});
  EXPECT_EQ(run_traced(argv).output, run_untraced(argv));
}

TEST_P(TracerTest, SignalsReachTheTracee) {
  TracedRun r = run_traced(target_argv(GetParam(), 100, 1, {"--signals", "25"}));
  EXPECT_EQ(r.output, "calls=100 signals=25\n");
}

TEST_P(TracerTest, DetachRestoresBytesAndTheProcessRunsOn) {
  int in[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  MemFile out;
  LaunchSpec spec;
  spec.argv = target_argv(GetParam(), 2000, 2, {"--pause"});
  spec.stdin_fd = in[0];
  spec.stdout_fd = out.fd;
  auto family = Family::launch(spec);
  TracedProcess* proc = &family->root();
  pid_t pid = proc->pid();
  ::close(in[0]);
  Symbol site = ProcessSymbols(pid).resolve(kSite);
  std::array<std::uint8_t, 16> before{}, after{};
  proc->memory().read(site.address, before);
  proc->space().sites().add(site.address).enable();

  SingleStepOver step;
  Session session(*proc, step);
  auto end = run_session(*family, session, [&] { return session.stats().hits == 4000; });
  ASSERT_EQ(end, RunEnd::Predicate);
  proc->detach();
  EXPECT_FALSE(proc->alive());

  ProcMemory(pid).read(site.address, after);
  EXPECT_EQ(before, after) << "original bytes must be back after detach";
  // The second round runs untraced: the process must be intact and count on correctly.
  ASSERT_EQ(::write(in[1], "go\n", 3), 3);
  ::close(in[1]);
  int status = probecost::test::wait_child(pid);  // the family's ticker still runs
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << WaitStatus(status).describe();
  EXPECT_EQ(out.contents(), "phase1 calls=4000\ncalls=8000 signals=0\n");
}

TEST_P(TracerTest, DestroyingTheOwnerKillsALaunchedProcess) {
  pid_t pid;
  {
    LaunchSpec spec;
    spec.argv = target_argv(GetParam(), 1, 1, {"--pause"});  // would wait for stdin forever
    int in[2];
    ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
    spec.stdin_fd = in[0];
    auto family = Family::launch(spec);
    pid = family->root().pid();
    ::close(in[0]);
    ::close(in[1]);
  }
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH) << "the process must be killed and reaped";
}

INSTANTIATE_TEST_SUITE_P(PieAndNonPie, TracerTest,
                         ::testing::Values(std::string(LOOP_TARGET_PIE),
                                           std::string(LOOP_TARGET_NOPIE)),
                         [](const auto& info) {
                           return std::string(info.param).find("nopie") != std::string::npos
                                      ? "NonPie"
                                      : "Pie";
                         });

TEST(TracerErrors, LaunchingAMissingProgramSaysWhy) {
  LaunchSpec spec;
  spec.argv = {"/no/such/program"};
  try {
    Family::launch(spec);
    FAIL() << "launch should have thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/no/such/program"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

TEST(TracerErrors, UnknownSymbolNamesSymbolAndProcess) {
  LaunchSpec spec;
  spec.argv = target_argv(LOOP_TARGET_PIE, 1, 1);
  auto family = Family::launch(spec);
  TracedProcess* proc = &family->root();
  try {
    ProcessSymbols(proc->pid()).resolve("no_such_function");
    FAIL() << "resolve should have thrown";
  } catch (const CannotProbe& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("no_such_function"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(proc->pid())), std::string::npos) << what;
  }
}

// An IFUNC's resolver called in the tracee (the fallback when no relocated slot tells) returns
// the implementation the loader bound libc's own calls to, and the process runs on unharmed.
TEST_P(TracerTest, AnIfuncResolverCalledInTheTraceeAgreesWithTheRelocatedSlot) {
  MemFile out;
  LaunchSpec spec;
  spec.argv = target_argv(GetParam(), 300, 2);
  spec.stdout_fd = out.fd;
  auto family = Family::launch(spec);
  TracedProcess* proc = &family->root();
  proc->run_to_entry();  // libc is loaded and relocated
  ProcessSymbols symbols(proc->pid());
  for (const char* name : {"strlen", "memcpy", "strcmp"}) {
    Symbol ifunc = symbols.resolve(name, "libc.so.6");
    ASSERT_TRUE(ifunc.ifunc) << name;
    IfuncTarget by_slot = resolve_ifunc(ifunc, symbols, proc->memory(), {}, proc->pid());
    EXPECT_NE(by_slot.resolved_by.find("slot"), std::string::npos) << by_slot.resolved_by;
    auto called = proc->calls().call(ifunc.address);
    ASSERT_TRUE(called.has_value()) << name;
    EXPECT_EQ(RuntimeAddr(*called), by_slot.address) << name;
  }
  Symbol site = symbols.resolve(kSite);
  proc->space().sites().add(site.address, site.name).enable();
  SingleStepOver step;
  Session session(*proc, step);
  EXPECT_EQ(run_session(*family, session), RunEnd::ProcessEnded);
  EXPECT_EQ(proc->space().sites().find(site.address)->hits, 600u);
  ASSERT_TRUE(proc->end());
  EXPECT_TRUE(proc->end()->exited() && proc->end()->exit_code() == 0) << proc->end()->describe();
  EXPECT_EQ(out.contents(), "calls=600 signals=0\n");
}

// A batch of injected system calls (RemoteCalls::batch: one thread lent once, with a way back)
// gives each call's own result, in order, in one thread; nothing else may be injected while it
// is open; afterwards the thread has its registers back, the bytes under the way back's frame
// are as they were, and the program runs on to its exact count.
TEST_P(TracerTest, ABatchOfInjectedCallsGivesEachResultAndLeavesTheThreadAsItWas) {
  MemFile out;
  LaunchSpec spec;
  spec.argv = target_argv(GetParam(), 300, 2);
  spec.stdout_fd = out.fd;
  auto family = Family::launch(spec);
  TracedProcess* proc = &family->root();
  proc->run_to_entry();
  Task* lent_task = proc->calls().any_stopped_thread();
  ASSERT_NE(lent_task, nullptr);
  user_regs_struct before = *lent_task->regs();
  std::vector<std::uint8_t> stack_before(8192);
  proc->memory().read(RuntimeAddr(before.rsp - stack_before.size()), stack_before);
  std::vector<long> results;
  pid_t lent_tid = 0;
  bool ran = proc->calls().batch([&](Task& lent, const RemoteCalls::SyscallRunner& run) {
    lent_tid = lent.tid();
    results.push_back(run(SYS_getpid, {}));
    results.push_back(run(SYS_gettid, {}));
    long page = run(SYS_mmap, {0, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0});
    results.push_back(page);
    results.push_back(run(SYS_munmap, {page, 4096, 0, 0, 0, 0}));
    results.push_back(run(SYS_close, {-1, 0, 0, 0, 0, 0}));
    EXPECT_THROW(proc->calls().call(RuntimeAddr(before.rip)), Error);  // not inside a batch
  });
  ASSERT_TRUE(ran);
  ASSERT_EQ(results.size(), 5u);
  EXPECT_EQ(results[0], proc->pid());
  EXPECT_EQ(results[1], lent_tid);
  EXPECT_GT(results[2], 0);
  EXPECT_EQ(results[3], 0);
  EXPECT_EQ(results[4], -EBADF);
  Task* after = proc->task(lent_tid);
  ASSERT_NE(after, nullptr);
  const user_regs_struct* now = after->regs();
  ASSERT_NE(now, nullptr);
  EXPECT_EQ(now->rip, before.rip);
  EXPECT_EQ(now->rsp, before.rsp);
  EXPECT_EQ(now->rbp, before.rbp);
  EXPECT_EQ(now->rax, before.rax);
  std::vector<std::uint8_t> stack_after(stack_before.size());
  proc->memory().read(RuntimeAddr(before.rsp - stack_after.size()), stack_after);
  EXPECT_EQ(stack_after, stack_before);
  Symbol site = ProcessSymbols(proc->pid()).resolve(kSite);
  proc->space().sites().add(site.address, site.name).enable();
  SingleStepOver step;
  Session session(*proc, step);
  EXPECT_EQ(run_session(*family, session), RunEnd::ProcessEnded);
  EXPECT_EQ(proc->space().sites().find(site.address)->hits, 600u);
  ASSERT_TRUE(proc->end());
  EXPECT_TRUE(proc->end()->exited() && proc->end()->exit_code() == 0) << proc->end()->describe();
  EXPECT_EQ(out.contents(), "calls=600 signals=0\n");
}
