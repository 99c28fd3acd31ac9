// A detach takes out the jump areas no thread can be in (tracer/core/our_mappings.hpp), after
// bringing a thread caught inside a trampoline out of it (tracer/core/process_run_out.cpp): the
// area goes, the thread goes on in the program's own code and the program ends well.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "restore/restore.hpp"
#include "tracer/core/family.hpp"
#include "tracer/jump/jump_probes.hpp"
#include "tracer/os/fault_plan.hpp"
#include "tracer/symbols/symbols.hpp"

using namespace probecost;

namespace {

// A stopped thread of `proc` inside a jump area's own code (its counting: not at a copy's
// first byte or jump back, which the detach moves the thread out of), or 0.
pid_t thread_in_trampoline(TracedProcess& proc) {
  for (auto& [tid, t] : proc.threads()) {
    auto rip = t.rip();
    if (!rip || proc.space().relocated().in_original(*rip)) continue;
    for (const OurMapping& m : proc.space().our_mappings().list()) {
      if (m.kind == OurMapping::Kind::JumpArea && m.start <= *rip &&
          *rip < m.start + static_cast<std::int64_t>(m.size))
        return tid;
    }
  }
  return 0;
}

std::vector<pid_t> all_tids(TracedProcess& proc) {
  std::vector<pid_t> tids;
  for (const auto& [tid, t] : proc.threads()) tids.push_back(tid);
  return tids;
}

// The launched inferior's wait status once it ends (reaped by the detach's waits, or now).
int exit_status(TracedProcess& proc) {
  if (proc.end()) return proc.end()->raw();
  return release_leftovers(proc.leftovers(), proc.pid(), true).value_or(-1);
}

}  // namespace

// Failed before process_run_out.cpp: the area stayed ("thread N is in it").
TEST(OurMappings, AThreadCaughtInATrampolineIsBroughtOutAndItsAreaGoes) {
  LaunchSpec spec;
  spec.argv = {INFERIOR_BIN, "--site", "probe", "--iterations", "200000000"};
  auto family = Family::launch(spec);
  TracedProcess& proc = family->root();
  pid_t pid = proc.pid();
  ProcessSymbols symbols(pid);
  Symbol sym = symbols.resolve("probecost_site_probe");
  JumpProbes jumps(proc, JumpOptions{});  // counting per CPU: a restartable sequence
  std::string why;
  ASSERT_TRUE(jumps.add(sym.address, symbols, 1, sym.name, why)) << why;
  ASSERT_EQ(proc.space().our_mappings().list().size(), 1u);
  RuntimeAddr area = proc.space().our_mappings().list().at(0).start;
  // Stopped again and again while it loops over the probe, until caught in the trampoline.
  pid_t caught = 0;
  for (int attempt = 0; attempt < 5000 && !caught; ++attempt) {
    proc.resume_stopped(all_tids(proc));
    proc.stop_all();
    caught = thread_in_trampoline(proc);
  }
  ASSERT_NE(caught, 0) << "never caught in the trampoline";
  std::uint64_t before = jumps.hits(0);
  proc.detach();
  EXPECT_TRUE(proc.space().our_mappings().list().empty());
  for (const auto& n : proc.space().our_mappings().notes()) ADD_FAILURE() << n;
  EXPECT_GT(proc.space().our_mappings().unmapped_bytes(), 0u);
  for (const Mapping& m : read_maps(pid)) EXPECT_FALSE(m.contains(area)) << m.path;
  // The hit it was counting, counted once (its sequence was not run twice) or not yet.
  EXPECT_LE(jumps.hits(0) - before, 1u);
  int status = exit_status(proc);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(OurMappings, AnAreaNoThreadIsInGoes) {
  LaunchSpec spec;
  spec.argv = {INFERIOR_BIN, "--site", "probe", "--iterations", "1000"};
  auto family = Family::launch(spec);
  TracedProcess& proc = family->root();
  pid_t pid = proc.pid();
  ProcessSymbols symbols(pid);
  Symbol sym = symbols.resolve("probecost_site_probe");
  JumpProbes jumps(proc, JumpOptions{});
  std::string why;
  ASSERT_TRUE(jumps.add(sym.address, symbols, 1, sym.name, why)) << why;
  RuntimeAddr area = proc.space().our_mappings().list().at(0).start;
  proc.detach();  // stopped at its entry: nowhere near the trampoline
  EXPECT_TRUE(proc.space().our_mappings().list().empty());
  EXPECT_TRUE(proc.space().our_mappings().notes().empty());
  EXPECT_GT(proc.space().our_mappings().unmapped_bytes(), 0u);
  for (const Mapping& m : read_maps(pid)) EXPECT_FALSE(m.contains(area)) << m.path;
  int status = exit_status(proc);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// An area a detach had to keep (here: forgotten before the detach, as one kept for a thread
// that could not be brought out is), its jumps out: the next attach takes it out.
TEST(OurMappings, AnAreaAnEarlierDetachKeptGoesAtTheNextAttach) {
  LaunchSpec spec;
  spec.argv = {INFERIOR_BIN, "--site", "probe", "--iterations", "200000000"};
  auto family = Family::launch(spec);
  TracedProcess& proc = family->root();
  pid_t pid = proc.pid();
  RuntimeAddr area;
  {
    ProcessSymbols symbols(pid);
    Symbol sym = symbols.resolve("probecost_site_probe");
    JumpProbes jumps(proc, JumpOptions{});
    std::string why;
    ASSERT_TRUE(jumps.add(sym.address, symbols, 1, sym.name, why)) << why;
    area = proc.space().our_mappings().list().at(0).start;
    proc.space().our_mappings().forget(area);
    proc.detach();
  }
  auto mapped = [&] {
    auto maps = read_maps(pid);
    return std::any_of(maps.begin(), maps.end(),
                       [&](const Mapping& m) { return m.contains(area); });
  };
  ASSERT_TRUE(mapped());
  {
    auto again = Family::attach(pid);
    Reclaimed r = reclaim_left_areas(again->root());
    EXPECT_GT(r.unmapped_bytes, 0u);
    for (const auto& n : r.notes) ADD_FAILURE() << n;
    again->root().detach();
  }
  EXPECT_FALSE(mapped());
  int status = exit_status(proc);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

namespace {

// probecost-inferior looping over its probe, attached by a tracer process of the test's own
// (forked) that catches a thread in the trampoline, then lets go with PROBECOST_DIE_AT_HIT's
// `plan`: its exit status (0: let go, 10: never caught; killed: the plan's death).
int trace_and_die(pid_t target, const std::string& plan) {
  pid_t tracer = ::fork();
  if (tracer == 0) {
    int code = 3;
    try {
      auto family = Family::attach(target, false);
      TracedProcess& proc = family->root();
      ProcessSymbols symbols(target);
      Symbol sym = symbols.resolve("probecost_site_probe");
      JumpProbes jumps(proc, JumpOptions{});
      std::string why;
      if (!jumps.add(sym.address, symbols, 1, sym.name, why)) ::_exit(4);
      pid_t caught = 0;
      for (int attempt = 0; attempt < 5000 && !caught; ++attempt) {
        proc.resume_stopped(all_tids(proc));
        proc.stop_all();
        caught = thread_in_trampoline(proc);
      }
      if (!caught) ::_exit(10);
      fault_plan::plan_death(plan.c_str());
      proc.detach();
      code = 0;
    } catch (const std::exception&) {
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(tracer, &status, 0);
  return status;
}

}  // namespace

// Issue 23 §1b: probecost SIGKILLed at each system call of bringing a caught thread out of a
// trampoline. The program goes on as untraced and ends well. Failed before, single-stepped:
// a death after a PTRACE_SINGLESTEP left the thread with TF set, killed by the next
// instruction's SIGTRAP.
TEST(OurMappings, ADeathWhileAThreadIsBroughtOutLeavesItRunning) {
  int caught = 0;
  for (int n = 1; n <= 12; ++n) {
    int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    pid_t target = ::fork();
    if (target == 0) {
      ::dup2(null, STDOUT_FILENO);
      ::execl(INFERIOR_BIN, INFERIOR_BIN, "--site", "probe", "--iterations", "30000000",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(null);
    int tracer = trace_and_die(target, "runout+" + std::to_string(n));
    int status = 0;
    ::waitpid(target, &status, 0);
    if (WIFEXITED(tracer) && WEXITSTATUS(tracer) == 10) continue;  // never caught: no run-out
    ++caught;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "death at runout+" << n << ": the program's status " << status << " (tracer " << tracer
        << ")";
  }
  EXPECT_GT(caught, 6) << "threads seldom caught in the trampoline";
}
