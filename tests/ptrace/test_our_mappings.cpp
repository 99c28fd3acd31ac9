// A detach takes out the jump areas no thread can be in (tracer/our_mappings.hpp), and keeps
// the one a thread is in: the thread goes on through its trampoline and the program ends well.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "tracer/family.hpp"
#include "tracer/jump_probes.hpp"
#include "tracer/symbols.hpp"

using namespace probecost;

namespace {

// A stopped thread of `proc` inside a jump area's own code (its counting: not at a copy's
// first byte or jump back, which the detach moves the thread out of), or 0.
pid_t thread_in_trampoline(TracedProcess& proc) {
  for (auto& [tid, t] : proc.tasks()) {
    auto rip = t.rip();
    if (!rip || proc.relocated().in_original(*rip)) continue;
    for (const OurMapping& m : proc.our_mappings().list()) {
      if (m.kind == OurMapping::Kind::JumpArea && m.start <= *rip &&
          *rip < m.start + static_cast<std::int64_t>(m.size))
        return tid;
    }
  }
  return 0;
}

std::vector<pid_t> all_tids(TracedProcess& proc) {
  std::vector<pid_t> tids;
  for (const auto& [tid, t] : proc.tasks()) tids.push_back(tid);
  return tids;
}

// The launched inferior's wait status once it ends (reaped by the detach's waits, or now).
int exit_status(TracedProcess& proc) {
  if (proc.end()) return proc.end()->raw();
  return release_leftovers(proc.leftovers(), proc.pid(), true).value_or(-1);
}

}  // namespace

TEST(OurMappings, AnAreaAThreadIsInStaysAndTheThreadRunsOn) {
  LaunchSpec spec;
  spec.argv = {INFERIOR_BIN, "--site", "probe", "--iterations", "200000000"};
  auto family = Family::launch(spec);
  TracedProcess& proc = family->root();
  pid_t pid = proc.pid();
  ProcessSymbols symbols(pid);
  Symbol sym = symbols.resolve("probecost_site_probe");
  JumpProbes jumps(proc, JumpOptions{});
  std::string why;
  ASSERT_TRUE(jumps.add(sym.address, symbols, 1, sym.name, why)) << why;
  ASSERT_EQ(proc.our_mappings().list().size(), 1u);
  // Stopped again and again while it loops over the probe, until caught in the trampoline.
  pid_t caught = 0;
  for (int attempt = 0; attempt < 5000 && !caught; ++attempt) {
    proc.resume_stopped(all_tids(proc));
    proc.stop_all();
    caught = thread_in_trampoline(proc);
  }
  ASSERT_NE(caught, 0) << "never caught in the trampoline";
  proc.detach();
  ASSERT_EQ(proc.our_mappings().list().size(), 1u);
  ASSERT_EQ(proc.our_mappings().notes().size(), 1u);
  EXPECT_NE(proc.our_mappings().notes()[0].find("thread " + std::to_string(caught) + " is in it"),
            std::string::npos)
      << proc.our_mappings().notes()[0];
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
  RuntimeAddr area = proc.our_mappings().list().at(0).start;
  proc.detach();  // stopped at its entry: nowhere near the trampoline
  EXPECT_TRUE(proc.our_mappings().list().empty());
  EXPECT_TRUE(proc.our_mappings().notes().empty());
  EXPECT_GT(proc.our_mappings().unmapped_bytes(), 0u);
  for (const Mapping& m : read_maps(pid)) EXPECT_FALSE(m.contains(area)) << m.path;
  int status = exit_status(proc);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}
