// compare's jump mechanism faults in its event ring before the timed loop: no hit of a short
// run pays for the ring's first touch (issue 19 §2).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "breakpoint/in_tracee/jump_area.hpp"
#include "compare/runner.hpp"
#include "tracer/core/family.hpp"
#include "tracer/jump/jump_probes.hpp"
#include "tracer/symbols/symbols.hpp"

using namespace probecost;

namespace {

struct Resident {
  std::uint64_t size_kb = 0, rss_kb = 0;
  int mappings = 0;
};

// The read-write mappings of the jump areas in /proc/PID/smaps: their size and what is resident.
Resident jump_area_residency(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
  Resident r;
  bool ours = false;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string first, perms;
    words >> first >> perms;
    if (first.find('-') != std::string::npos && perms.size() == 4) {  // a mapping's first line
      ours = perms[1] == 'w' &&
             line.find(std::string("/memfd:") + jump::kAreaName) != std::string::npos;
      r.mappings += ours;
    } else if (ours && first == "Size:") {
      std::uint64_t kb = 0;
      words.seekg(0) >> first >> kb;
      r.size_kb += kb;
    } else if (ours && first == "Rss:") {
      std::uint64_t kb = 0;
      words.seekg(0) >> first >> kb;
      r.rss_kb += kb;
    }
  }
  return r;
}

}  // namespace

TEST(JumpRings, PopulatedBeforeTheFirstHit) {
  LaunchSpec spec;
  spec.argv = {INFERIOR_BIN, "--site", "probe", "--iterations", "10"};
  auto family = Family::launch(spec);
  TracedProcess* proc = &family->root();
  ProcessSymbols symbols(proc->pid());
  Symbol sym = symbols.resolve("probecost_site_probe");
  JumpOptions options;
  options.events = true;
  options.event_sites = 1;
  JumpProbes jumps(*proc, options);
  std::string why;
  ASSERT_TRUE(jumps.add(sym.address, symbols, 1, sym.name, why)) << why;

  Resident before = jump_area_residency(proc->pid());
  ASSERT_GE(before.mappings, 1);
  // 2^16 records of 24 bytes: the ring alone is 1.5 MiB, resident from its mapping on
  // (JumpMap faults the areas in when it maps them), before any record is written.
  ASSERT_GE(before.size_kb, 1536u);
  EXPECT_EQ(before.rss_kb, before.size_kb);

  populate_jump_areas(*proc);
  Resident after = jump_area_residency(proc->pid());
  EXPECT_EQ(after.mappings, before.mappings);
  EXPECT_EQ(after.rss_kb, after.size_kb);
}
